"""Memo: a summary-token transformer over one token per env step (plain torch, no Ray).

A LLaMA-style pre-norm decoder (RMSNorm, bias-free attention, gated MLP, RoPE, layer-drop) with
three modes that share every line of the network (see docs/memo.md):

- ``memo``: the trial is cut into segments of ``l_seg`` steps; at the end of each full segment the
  model writes ``l_sum`` summary vectors, and every later step attends to all summaries written so
  far plus the raw tokens of its own segment. ``max_summaries`` caps the summary memory (in blocks
  of ``l_sum``) with FIFO eviction (streaming Memo).
- ``rmt``: the same, but only the newest summary block is kept (memory overwritten).
- ``fct``: full causal context over all steps; ``fct_window`` turns it into a FIFO window.

Two ways to run it, numerically the same at fixed segmentation (tested to 1e-4 in float32):

- ``forward(x, seg_len)`` (here): the training forward, a sequential loop over segments with
  backprop through all of them. Chunk k sees ``[S_1..S_k ; chunk tokens ; summary slots]`` with
  positions restarting at 0 in every chunk, as in the paper; the summaries' K/V are kept from one
  chunk to the next, so only the newly written block runs again.
- ``step(x_t, cache)`` and ``prefill`` (``MemoStepping``, stepping.py): one env step for a batch of
  envs with a KV cache of the kept summaries plus the current segment.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from memrl.methods.memo.cache import MemoCache, WritePlan
from memrl.methods.memo.layers import (
    MODES,
    Block,
    MemoConfig,
    RMSNorm,
    attend,
    causal_mask,
    rotate,
    self_attend,
    visible_mask,
)
from memrl.methods.memo.stepping import MemoStepping


class MemoTransformer(MemoStepping, nn.Module):
    """The decoder over step tokens; see the module docstring for the three modes."""

    def __init__(self, cfg: MemoConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.slots = nn.Embedding(cfg.l_sum, cfg.d_model)
        inv = cfg.rope_base ** (-torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)
        self._rope_cos = self._rope_sin = None  # tables by position, built on demand
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    # ------------------------------------------------------------------ core
    def _rope(self, start: int | np.ndarray, length: int, upto: int) -> tuple:
        """RoPE factors (1|E, length, 1, 1, hd) at positions ``start + [0, length)``.

        ``start`` is an int or per row (E,) (host array); ``upto`` bounds the positions.
        """
        inv = self.inv_freq
        table = self._rope_cos
        if (
            table is None
            or table.shape[0] < upto
            or table.device != inv.device
            or table.dtype != inv.dtype
        ):
            size = max(upto, 1024, 0 if table is None else 2 * table.shape[0])
            angles = torch.arange(size, device=inv.device).to(inv.dtype)[:, None] * inv
            cos, sin = angles.cos(), angles.sin()
            self._rope_cos = torch.cat([cos, cos], dim=-1)  # (size, hd)
            self._rope_sin = torch.cat([-sin, sin], dim=-1)
        if isinstance(start, int):
            cos = self._rope_cos[start : start + length]
            sin = self._rope_sin[start : start + length]
            return cos[None, :, None, None], sin[None, :, None, None]
        first = torch.as_tensor(start, device=inv.device)
        idx = first[:, None] + torch.arange(length, device=inv.device)  # (E, L)
        return self._rope_cos[idx][:, :, None, None], self._rope_sin[idx][:, :, None, None]

    def _where(
        self,
        start: int | np.ndarray,
        length: int,
        keys: int,
        batch: int,
        rows: np.ndarray | None = None,
        mask: torch.Tensor | None = None,
    ) -> WritePlan:
        """A write plan for ``length`` new tokens per row (rows: sorted cache rows or None)."""
        if rows is not None and len(rows) == batch:
            rows = None  # every row, in order
        if rows is None and isinstance(start, int):
            return WritePlan(start, keys, None, mask)
        dev = self.inv_freq.device
        r = torch.as_tensor(rows if rows is not None else np.arange(batch), device=dev)
        first = torch.as_tensor(
            np.full(len(r), start) if isinstance(start, int) else start, device=dev
        )
        idx = first[:, None] + torch.arange(length, device=dev)
        return WritePlan(first, keys, None if rows is None else r, mask, (r[:, None], idx))

    def _layers(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        *,
        kv: torch.Tensor | None = None,
        where: WritePlan | None = None,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        keep: list[bool] | None = None,
        collect: bool = False,
        prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Runs tokens x (B, L, d) through all layers; returns final-normed outputs (B, L, d).

        Without a cache the tokens attend among themselves (``causal`` or ``mask``). With one,
        each layer first writes the tokens' K/V into ``kv`` as ``where`` says, then attends to
        the keys ``where`` names: one ``scaled_dot_product_attention`` per layer. ``prefix``:
        each kept layer's (K, V) (B, H, P, hd) of earlier tokens, put before the tokens' own
        (differentiable; ``mask`` then spans the P + L keys). ``collect`` also returns each kept
        layer's new (K, V) (B, H, L, hd).
        """
        cfg = self.cfg
        B, L, d = x.shape
        H, hd, eps = cfg.n_heads, cfg.head_dim, cfg.norm_eps
        shape = (d,)
        kvs = []
        h = x
        kept = 0
        for i, block in enumerate(self.blocks):
            if keep is not None and not keep[i]:
                continue
            attn, mlp = block.attn, block.mlp
            a = F.rms_norm(h, shape, block.attn_norm.weight, eps)
            qkv = F.linear(a, attn.qkv.weight).view(B, L, 3, H, hd)
            # q and k rotated together: (B, L, 2, H, hd) -> (B, H, 2, L, hd) -> 2 x (B, H, L, hd).
            q, k = rotate(qkv[:, :, :2], cos, sin).transpose(1, 3).unbind(2)
            v = qkv[:, :, 2].transpose(1, 2)  # (B, H, L, hd)
            if prefix is not None:
                pk, pv = prefix[kept]
                keys, values = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
                y = self_attend(q, keys, values, mask)
            elif where is None:
                y = self_attend(q, k, v, mask, causal)
            else:
                keys, values = where.write(kv[i], k, v)
                y = attend(q, keys, values, where.mask)
            h = h + F.linear(y.transpose(1, 2).reshape(B, L, d), attn.o_proj.weight)
            m = F.rms_norm(h, shape, block.mlp_norm.weight, eps)
            gate, up = F.linear(m, mlp.gate_up.weight).chunk(2, dim=-1)
            h = h + F.linear(F.gelu(gate) * up, mlp.down.weight)
            if collect:
                kvs.append((k, v))
            kept += 1
        return F.rms_norm(h, shape, self.norm.weight, eps), kvs

    def _layer_keep(self, layer_drop: bool | None) -> list[bool] | None:
        active = self.training if layer_drop is None else layer_drop
        if not active or self.cfg.layer_drop <= 0.0:
            return None
        return (torch.rand(self.cfg.n_layers) >= self.cfg.layer_drop).tolist()

    def _causal_run(
        self, x: torch.Tensor, keep: list[bool] | None = None, collect: bool = False
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """x (B, L, d) at positions [0, L) with plain causal attention (fct: its window)."""
        L = x.shape[1]
        cos, sin = self._rope(0, L, L)
        window = self.cfg.fct_window if self.cfg.mode == "fct" else None
        if window is not None and window < L:
            mask = causal_mask(L, x.device, window)
            return self._layers(x, cos, sin, mask=mask, keep=keep, collect=collect)
        return self._layers(x, cos, sin, causal=True, keep=keep, collect=collect)

    # ------------------------------------------------------------- training
    def forward(
        self, x: torch.Tensor, seg_len: int | None = None, layer_drop: bool | None = None
    ) -> torch.Tensor:
        """Training forward over whole sequences from their first step.

        Args:
            x: (B, T, d_model) step tokens (padding, if any, at the end of a row).
            seg_len: segment length for memo/rmt (default l_seg; the learner randomizes it).
            layer_drop: apply layer-drop (default: in training mode).

        Returns:
            (B, T, d_model) final features, one per step.
        """
        cfg = self.cfg
        B, T, _ = x.shape
        keep = self._layer_keep(layer_drop)
        if cfg.mode == "fct":
            return self._causal_run(x, keep)[0]
        seg = seg_len or cfg.l_seg
        if seg < 1:
            raise ValueError(f"seg_len must be >= 1, got {seg}")
        slots = self.slots.weight[None].expand(B, -1, -1)
        cap = cfg.summary_cap
        mem = x.new_zeros(B, 0, cfg.d_model)  # (B, n*l_sum, d) summaries fed back as inputs
        # The summaries lead every chunk at positions from 0 under causal attention, so a chunk
        # computes exactly what the last one did for the summaries both hold: their K/V are
        # kept (``prefix``, one (K, V) per kept layer, of mem[:, :held]) and only the newly
        # written summaries are run again, until an eviction moves every position.
        prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        held = 0
        outs = []
        for start in range(0, T, seg):
            chunk = x[:, start : start + seg]
            n, L = mem.shape[1], chunk.shape[1]
            emit = L == seg and start + seg < T  # summaries of the last chunk are never read
            new = mem[:, held:]
            inp = torch.cat([new, chunk, slots] if emit else [new, chunk], dim=1)
            h, kvs = self._prefixed_run(inp, prefix, held, keep, collect=emit)
            fresh = n - held  # summary tokens run in this chunk
            outs.append(h[:, fresh : fresh + L])
            if emit:
                kvs = [(k[:, :, :fresh], v[:, :, :fresh]) for k, v in kvs]
                if prefix is not None:
                    kvs = [
                        (torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2))
                        for (pk, pv), (k, v) in zip(prefix, kvs, strict=True)
                    ]
                prefix, held = kvs, n
                mem = torch.cat([mem, h[:, fresh + L :]], dim=1)
                if cap is not None and mem.shape[1] > cap * cfg.l_sum:
                    mem = mem[:, -cap * cfg.l_sum :]
                    prefix, held = None, 0  # positions moved: run them all again
        return torch.cat(outs, dim=1)

    def _prefixed_run(
        self,
        x: torch.Tensor,
        prefix: list[tuple[torch.Tensor, torch.Tensor]] | None,
        P: int,
        keep: list[bool] | None,
        collect: bool,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """x (B, L, d) at positions [P, P + L), causal over the P earlier tokens whose K/V
        ``prefix`` holds (one per kept layer) and over themselves (no prefix: ``_causal_run``)."""
        if prefix is None:
            return self._causal_run(x, keep, collect=collect)
        L = x.shape[1]
        cos, sin = self._rope(P, L, P + L)
        ar = torch.arange(L, device=x.device)
        mask = visible_mask(P, P + L, ar)
        return self._layers(x, cos, sin, mask=mask, keep=keep, collect=collect, prefix=prefix)


__all__ = ["MODES", "MemoCache", "MemoConfig", "MemoTransformer"]
