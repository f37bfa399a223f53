"""The building blocks of the Memo transformer (plain torch): its config, RMSNorm, RoPE, attention
and gated-MLP parameters, masks. ``MemoTransformer`` (network.py) applies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

MODES = ("memo", "fct", "rmt")


@dataclass(frozen=True)
class MemoConfig:
    """Sizes and mode of a MemoTransformer: the one declaration of these settings (the RLModule's
    config and ``model: {type: memo}`` in YAML extend it)."""

    mode: str = "memo"
    """memo (accumulated summaries), fct (full causal context) or rmt (newest summary only)."""
    d_model: int = 64
    """Width of tokens and hidden states (paper: 256)."""
    n_layers: int = 2
    """Decoder layers (paper: 4)."""
    n_heads: int = 4
    """Attention heads (paper: 8; d_model must be divisible by it, head size even for RoPE)."""
    d_mlp: int | None = None
    """Hidden width of the gated MLP (null: 4 * d_model)."""
    l_seg: int = 16
    """Segment length in env steps (memo, rmt; paper: 256)."""
    l_sum: int = 4
    """Summary tokens written at the end of each full segment (memo, rmt; paper: 32)."""
    fct_window: int | None = None
    """fct only: attend to the last W steps including the current one (streaming FCT; null: the
    whole trial)."""
    max_summaries: int | None = None
    """memo only: keep at most this many summary blocks, evicting the oldest (streaming Memo;
    null: all)."""
    layer_drop: float = 0.0
    """Probability that a layer (both residual branches) is skipped in a training forward (paper:
    0.1)."""
    rope_base: float = 10000.0
    """RoPE base."""
    norm_eps: float = 1e-6
    """RMSNorm epsilon."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"MemoConfig.mode must be one of {list(MODES)}, got {self.mode!r}")
        for name in ("d_model", "n_layers", "n_heads", "l_seg", "l_sum"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MemoConfig.{name} must be an int >= 1, got {value!r}")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"MemoConfig: d_model ({self.d_model}) must be divisible by n_heads "
                f"({self.n_heads}) into an even head size (RoPE rotates pairs)"
            )
        if self.fct_window is not None and self.fct_window < 1:
            raise ValueError(f"MemoConfig.fct_window must be None or >= 1, got {self.fct_window}")
        if self.max_summaries is not None and self.max_summaries < 1:
            raise ValueError(
                f"MemoConfig.max_summaries must be None or >= 1, got {self.max_summaries}"
            )
        if not 0.0 <= self.layer_drop < 1.0:
            raise ValueError(f"MemoConfig.layer_drop must be in [0, 1), got {self.layer_drop}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def summary_cap(self) -> int | None:
        """Summary blocks kept (None: unbounded)."""
        return 1 if self.mode == "rmt" else self.max_summaries


class RMSNorm(nn.Module):
    """The scale of an RMSNorm (applied with ``F.rms_norm`` by ``MemoTransformer._layers``)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on x (..., hd): ``x * cos + swap_halves(x) * sin``.

    cos = [c, c] and sin = [-s, s] (see ``MemoTransformer._rope``), broadcastable to x; the same
    as rotating each pair (x_i, x_{i+hd/2}) by the position's angle.
    """
    swapped = x.unflatten(-1, (2, x.shape[-1] // 2)).flip(-2).flatten(-2)
    return torch.addcmul(x * cos, swapped, sin)


def _fuse_old_keys(old: tuple[str, ...], new: str) -> Any:
    """A load_state_dict pre-hook that concatenates the weights of separate projections saved by
    memrl 0.1 (``old``, in order) into the fused ``new`` weight."""

    def hook(state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        keys = [f"{prefix}{name}.weight" for name in old]
        if all(k in state_dict for k in keys):
            state_dict[f"{prefix}{new}.weight"] = torch.cat([state_dict.pop(k) for k in keys])

    return hook


class Attention(nn.Module):
    """Bias-free projections of one layer: q, k and v fused into one (3d, d) weight, then o.

    (Applied by ``MemoTransformer._layers``.) Weights saved with separate q/k/v projections
    load into the fused one.
    """

    def __init__(self, cfg: MemoConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self._register_load_state_dict_pre_hook(
            _fuse_old_keys(("q_proj", "k_proj", "v_proj"), "qkv")
        )


class GatedMLP(nn.Module):
    """down(gelu(gate(x)) * up(x)), with gate and up fused into one (2h, d) weight (applied by
    ``MemoTransformer._layers``)."""

    def __init__(self, cfg: MemoConfig) -> None:
        super().__init__()
        self.hidden = cfg.d_mlp or 4 * cfg.d_model
        self.gate_up = nn.Linear(cfg.d_model, 2 * self.hidden, bias=False)
        self.down = nn.Linear(self.hidden, cfg.d_model, bias=False)
        self._register_load_state_dict_pre_hook(_fuse_old_keys(("gate", "up"), "gate_up"))


class Block(nn.Module):
    """One pre-norm decoder layer's parameters (applied by ``MemoTransformer._layers``)."""

    def __init__(self, cfg: MemoConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = GatedMLP(cfg)


def causal_mask(n: int, device: torch.device, window: int | None = None) -> torch.Tensor:
    i = torch.arange(n, device=device)
    mask = i[None, :] <= i[:, None]
    if window is not None:
        mask &= i[None, :] > i[:, None] - window
    return mask


def self_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` of the training forward. Under a CPU autocast it runs
    in float32: CPU's bfloat16 flash-attention backward measured ~10x slower than float32's
    (d_model 64, 4 heads, 10-40 rows of ~30 tokens); the matmuls around it keep bfloat16."""
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):
            return F.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), attn_mask=mask, is_causal=causal
            )
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """Attention of q (B, H, L, hd) over k, v (B, H, T, hd); mask True where a key is visible.

    With one query per row on a CPU, two batched matmuls around a softmax read the keys faster
    than the fused kernel (measured 10-20% at B=32); otherwise the fused kernel.
    """
    if q.shape[2] != 1 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-1, -2))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def visible_mask(first: int | np.ndarray, keys: int, ar: torch.Tensor) -> torch.Tensor:
    """Key mask of L new tokens at buffer indices ``first + ar`` (one start, or one per row (E,)):
    each sees the keys up to itself; (L, keys) or (E, 1, L, keys)."""
    j = torch.arange(keys, device=ar.device)
    if isinstance(first, int):
        return j[None] <= (first + ar)[:, None]
    first_t = torch.as_tensor(first, device=ar.device)
    return (j[None, None] <= (first_t[:, None] + ar)[:, :, None])[:, None]
