"""Memo: a summary-token transformer over one token per env step (plain torch, no Ray).

A LLaMA-style pre-norm decoder (RMSNorm, bias-free attention, gated MLP, RoPE, layer-drop) with
three modes that share every line of the network (see specs/memo.md):

- ``memo``: the trial is cut into segments of ``l_seg`` steps; at the end of each full segment the
  model writes ``l_sum`` summary vectors, and every later step attends to all summaries written so
  far plus the raw tokens of its own segment. ``max_summaries`` caps the summary memory (in blocks
  of ``l_sum``) with FIFO eviction (streaming Memo).
- ``rmt``: the same, but only the newest summary block is kept (memory overwritten).
- ``fct``: full causal context over all steps; ``fct_window`` turns it into a FIFO window.

Two ways to run it, numerically the same at fixed segmentation (tested to 1e-4 in float32):

- ``forward(x, seg_len)``: the training forward, a sequential loop over segments with backprop
  through all of them. Chunk k sees ``[S_1..S_k ; chunk tokens ; summary slots]`` with positions
  restarting at 0 in every chunk (summaries are re-encoded in each chunk, as in the paper).
- ``step(x_t, cache)``: one env step for a batch of envs with a KV cache. Memo's cache holds the
  K/V of the kept summaries plus those of the current segment, so at most ``n*l_sum + l_seg``
  tokens. At a segment's last step the summary slots are run against the cache, their normed
  outputs are run once more through all layers against the old summary K/V only (positions
  continuing after them), and the result replaces the segment's K/V. When a summary block is
  evicted (``max_summaries``, ``rmt``), the kept summaries are re-encoded from their stored input
  vectors at positions from 0, exactly as the training forward sees them.

Envs in one batch may be at different steps of their trials: per-env counters and key masks keep
the step path vectorized (no Python loop over envs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

MODES = ("memo", "fct", "rmt")


@dataclass(frozen=True)
class MemoConfig:
    """Sizes and mode of a MemoTransformer."""

    d_model: int = 64
    """Width of tokens and hidden states."""
    n_layers: int = 2
    """Decoder layers."""
    n_heads: int = 4
    """Attention heads (d_model must be divisible by it, head size even for RoPE)."""
    l_seg: int = 16
    """Segment length in env steps (memo, rmt)."""
    l_sum: int = 4
    """Summary tokens written at the end of each full segment (memo, rmt)."""
    mode: str = "memo"
    """memo (accumulated summaries), fct (full causal context) or rmt (newest summary only)."""
    d_mlp: int | None = None
    """Hidden width of the gated MLP (None: 4 * d_model)."""
    fct_window: int | None = None
    """fct only: attend to the last W steps including the current one (None: all steps)."""
    max_summaries: int | None = None
    """memo only: keep at most this many summary blocks, evicting the oldest (None: all)."""
    layer_drop: float = 0.0
    """Probability that a layer (both residual branches) is skipped in a training forward."""
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


@dataclass
class MemoCache:
    """Per-env inference state of a MemoTransformer (a batch of envs, one row each).

    memo/rmt: ``sum_kv`` (n_layers, 2, B, H, C, hd) holds the summaries' K/V, ``sum_x`` (B, C, d)
    their input vectors (for re-encoding on eviction), ``n_sum`` (B,) the summary tokens held;
    ``seg_kv`` (n_layers, 2, B, H, l_seg, hd) and ``seg_len`` (B,) the current segment.
    fct: ``kv`` (n_layers, 2, B, H, C, hd) and ``t`` (B,) the steps seen (a ring buffer of size
    fct_window when that is set).
    """

    sum_kv: torch.Tensor | None = None
    sum_x: torch.Tensor | None = None
    n_sum: torch.Tensor | None = None
    seg_kv: torch.Tensor | None = None
    seg_len: torch.Tensor | None = None
    kv: torch.Tensor | None = None
    t: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        counter = self.t if self.t is not None else self.seg_len
        return int(counter.shape[0])


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on x (B, H, L, hd) with cos/sin broadcastable to (B, 1, L, hd/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


Past = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]
"""Cached key groups one layer attends to: (K, V, key mask), K/V (B, H, Tp, hd), mask (B, Tp)."""


class Attention(nn.Module):
    """Multi-head attention without biases; attends to cached key groups plus the new tokens."""

    def __init__(self, cfg: MemoConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        past: Past,
        self_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, L, d), self_mask (L, L) bool (True: attend) -> y (B, L, d), k, v (B, H, L, hd)."""
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, L, hd)
        k = self.k_proj(x).view(B, L, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, L, self.n_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if not past:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self_mask)
        else:
            scale = 1.0 / math.sqrt(self.head_dim)
            scores, values = [], []
            for pk, pv, pmask in past:
                s = torch.matmul(q, pk.transpose(-1, -2)) * scale  # (B, H, L, Tp)
                if pmask is not None:
                    s = s.masked_fill(~pmask[:, None, None, :], float("-inf"))
                scores.append(s)
                values.append(pv)
            s = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, L, L)
            scores.append(s.masked_fill(~self_mask, float("-inf")))
            values.append(v)
            att = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
            parts = att.split([val.shape[2] for val in values], dim=-1)
            y = sum(torch.matmul(p, val) for p, val in zip(parts, values, strict=True))
        y = y.transpose(1, 2).reshape(B, L, -1)
        return self.o_proj(y), k, v


class GatedMLP(nn.Module):
    """down(gelu(gate(x)) * up(x))."""

    def __init__(self, cfg: MemoConfig) -> None:
        super().__init__()
        hidden = cfg.d_mlp or 4 * cfg.d_model
        self.gate = nn.Linear(cfg.d_model, hidden, bias=False)
        self.up = nn.Linear(cfg.d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: MemoConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = GatedMLP(cfg)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        past: Past,
        self_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, k, v = self.attn(self.attn_norm(x), cos, sin, past, self_mask)
        x = x + a
        x = x + self.mlp(self.mlp_norm(x))
        return x, k, v


def _causal(n: int, device: torch.device, window: int | None = None) -> torch.Tensor:
    i = torch.arange(n, device=device)
    mask = i[None, :] <= i[:, None]
    if window is not None:
        mask &= i[None, :] > i[:, None] - window
    return mask


class MemoTransformer(nn.Module):
    """The decoder over step tokens; see the module docstring for the three modes."""

    def __init__(self, cfg: MemoConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.slots = nn.Embedding(cfg.l_sum, cfg.d_model)
        inv = cfg.rope_base ** (-torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    # ------------------------------------------------------------------ core
    def _run(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        past: list[Past] | None,
        self_mask: torch.Tensor,
        keep: list[bool] | None = None,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Runs tokens x (B, L, d) at positions pos (L,) or (B, L) through all layers.

        Returns the final-normed outputs (B, L, d) and each layer's new (K, V) (B, H, L, hd).
        """
        angles = pos.to(self.inv_freq.dtype)[..., None] * self.inv_freq  # (L|B, L, hd/2)
        if angles.dim() == 2:
            angles = angles[None]
        cos, sin = angles.cos()[:, None], angles.sin()[:, None]  # (1|B, 1, L, hd/2)
        kvs = []
        h = x
        for i, block in enumerate(self.blocks):
            if keep is not None and not keep[i]:
                continue
            h, k, v = block(h, cos, sin, past[i] if past else [], self_mask)
            kvs.append((k, v))
        return self.norm(h), kvs

    def _layer_keep(self, layer_drop: bool | None) -> list[bool] | None:
        active = self.training if layer_drop is None else layer_drop
        if not active or self.cfg.layer_drop <= 0.0:
            return None
        return (torch.rand(self.cfg.n_layers) >= self.cfg.layer_drop).tolist()

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
            pos = torch.arange(T, device=x.device)
            y, _ = self._run(x, pos, None, _causal(T, x.device, cfg.fct_window), keep)
            return y
        seg = seg_len or cfg.l_seg
        if seg < 1:
            raise ValueError(f"seg_len must be >= 1, got {seg}")
        slots = self.slots.weight[None].expand(B, -1, -1)
        cap = cfg.summary_cap
        mem = x.new_zeros(B, 0, cfg.d_model)  # (B, n*l_sum, d) summaries fed back as inputs
        outs = []
        for start in range(0, T, seg):
            chunk = x[:, start : start + seg]
            n, L = mem.shape[1], chunk.shape[1]
            emit = L == seg and start + seg < T  # summaries of the last chunk are never read
            inp = torch.cat([mem, chunk, slots] if emit else [mem, chunk], dim=1)
            pos = torch.arange(inp.shape[1], device=x.device)
            h, _ = self._run(inp, pos, None, _causal(inp.shape[1], x.device), keep)
            outs.append(h[:, n : n + L])
            if emit:
                mem = torch.cat([mem, h[:, n + L :]], dim=1)
                if cap is not None:
                    mem = mem[:, -cap * cfg.l_sum :]
        return torch.cat(outs, dim=1)

    # ------------------------------------------------------------ inference
    def init_cache(self, batch_size: int) -> MemoCache:
        """An empty cache for ``batch_size`` envs."""
        cfg = self.cfg
        p = self.slots.weight
        long = dict(dtype=torch.long, device=p.device)
        if cfg.mode == "fct":
            cap = cfg.fct_window or 64
            return MemoCache(kv=self._kv_buffer(batch_size, cap), t=torch.zeros(batch_size, **long))
        cap = cfg.summary_cap
        c = cap * cfg.l_sum if cap is not None else 4 * cfg.l_sum
        return MemoCache(
            sum_kv=self._kv_buffer(batch_size, c),
            sum_x=p.new_zeros(batch_size, c, cfg.d_model),
            n_sum=torch.zeros(batch_size, **long),
            seg_kv=self._kv_buffer(batch_size, cfg.l_seg),
            seg_len=torch.zeros(batch_size, **long),
        )

    def _kv_buffer(self, batch_size: int, length: int) -> torch.Tensor:
        cfg = self.cfg
        return self.slots.weight.new_zeros(
            cfg.n_layers, 2, batch_size, cfg.n_heads, length, cfg.head_dim
        )

    @staticmethod
    def _grow(buf: torch.Tensor, dim: int, need: int) -> torch.Tensor:
        have = buf.shape[dim]
        if need <= have:
            return buf
        shape = list(buf.shape)
        shape[dim] = max(need, 2 * have) - have
        return torch.cat([buf, buf.new_zeros(shape)], dim=dim)

    @torch.no_grad()
    def step(self, x: torch.Tensor, cache: MemoCache) -> tuple[torch.Tensor, MemoCache]:
        """One env step for every env of the batch.

        Args:
            x: (B, d_model) the step tokens.
            cache: the envs' cache (updated in place and returned).

        Returns:
            (B, d_model) features of this step, and the cache.
        """
        if self.cfg.mode == "fct":
            return self._step_fct(x, cache), cache
        cfg = self.cfg
        B = x.shape[0]
        rows = torch.arange(B, device=x.device)
        # Read only up to the fullest env's entries: the cost of a step follows what is held.
        ns, ss = int(cache.n_sum.max()), int(cache.seg_len.max())
        sum_mask = torch.arange(ns, device=x.device)[None] < cache.n_sum[:, None]  # (B, ns)
        seg_mask = torch.arange(ss, device=x.device)[None] < cache.seg_len[:, None]  # (B, ss)
        past = []
        for i in range(cfg.n_layers):
            groups = []
            if ns:
                groups.append(
                    (cache.sum_kv[i, 0, :, :, :ns], cache.sum_kv[i, 1, :, :, :ns], sum_mask)
                )
            if ss:
                groups.append(
                    (cache.seg_kv[i, 0, :, :, :ss], cache.seg_kv[i, 1, :, :, :ss], seg_mask)
                )
            past.append(groups)
        pos = (cache.n_sum + cache.seg_len)[:, None]  # (B, 1)
        self_mask = torch.ones(1, 1, dtype=torch.bool, device=x.device)
        h, kvs = self._run(x[:, None], pos, past, self_mask)
        new = torch.stack([torch.stack(kv) for kv in kvs])[..., 0, :]  # (nl, 2, B, H, hd)
        cache.seg_kv[:, :, rows, :, cache.seg_len] = new.permute(2, 0, 1, 3, 4)
        cache.seg_len += 1
        done = (cache.seg_len == cfg.l_seg).nonzero().flatten()
        if done.numel():
            self._write_summaries(cache, done)
        return h[:, 0], cache

    def _write_summaries(self, cache: MemoCache, envs: torch.Tensor) -> None:
        """Segment end for the envs ``envs``: summary slots -> new summary K/V, segment dropped."""
        cfg = self.cfg
        dev = envs.device
        n = cache.n_sum[envs]  # (E,)
        c = int(n.max())  # read only the summaries held
        everyone = len(envs) == cache.batch_size  # envs in lockstep: views, no gathers
        sum_kv = cache.sum_kv[..., :c, :]
        sum_kv = sum_kv if everyone else sum_kv[:, :, envs]
        seg_kv = cache.seg_kv if everyone else cache.seg_kv[:, :, envs]
        sum_mask = torch.arange(c, device=dev)[None] < n[:, None]
        ar = torch.arange(cfg.l_sum, device=dev)
        causal = _causal(cfg.l_sum, dev)
        past = [
            [(sum_kv[i, 0], sum_kv[i, 1], sum_mask), (seg_kv[i, 0], seg_kv[i, 1], None)]
            for i in range(cfg.n_layers)
        ]
        slots = self.slots.weight[None].expand(len(envs), -1, -1)
        summaries, _ = self._run(slots, n[:, None] + cfg.l_seg + ar, past, causal)  # (E, l_sum, d)

        cap = cfg.summary_cap
        evict = n >= cap * cfg.l_sum if cap is not None else torch.zeros_like(n, dtype=torch.bool)
        keep = (~evict).nonzero().flatten()
        if keep.numel():
            e, nk = envs[keep], n[keep]
            need = int(nk.max()) + cfg.l_sum
            cache.sum_kv = self._grow(cache.sum_kv, 4, need)
            cache.sum_x = self._grow(cache.sum_x, 1, need)
            if len(keep) < len(envs):
                sum_kv, sum_mask = sum_kv[:, :, keep], sum_mask[keep]
            past = [[(sum_kv[i, 0], sum_kv[i, 1], sum_mask)] for i in range(cfg.n_layers)]
            _, kvs = self._run(summaries[keep], nk[:, None] + ar, past, causal)
            idx = nk[:, None] + ar  # (E_k, l_sum)
            new = torch.stack([torch.stack(kv) for kv in kvs])  # (nl, 2, E_k, H, l_sum, hd)
            cache.sum_kv[:, :, e[:, None], :, idx] = new.permute(2, 4, 0, 1, 3, 5)
            cache.sum_x[e[:, None], idx] = summaries[keep]
            cache.n_sum[e] += cfg.l_sum
        drop = evict.nonzero().flatten()
        if drop.numel():
            e, total = envs[drop], cap * cfg.l_sum
            mem = torch.cat([cache.sum_x[e, cfg.l_sum : total], summaries[drop]], dim=1)
            pos = torch.arange(total, device=dev)
            _, kvs = self._run(mem, pos, None, _causal(total, dev))
            new = torch.stack([torch.stack(kv) for kv in kvs])  # (nl, 2, E_d, H, total, hd)
            cache.sum_kv[:, :, e, :, :total] = new
            cache.sum_x[e, :total] = mem
        cache.seg_len[envs] = 0

    def _step_fct(self, x: torch.Tensor, cache: MemoCache) -> torch.Tensor:
        cfg = self.cfg
        B = x.shape[0]
        dev = x.device
        rows = torch.arange(B, device=dev)
        t = cache.t
        w = cfg.fct_window
        held = int(t.max()) if w is None else min(int(t.max()), w)
        if w is None:
            cache.kv = self._grow(cache.kv, 4, held + 1)
            j = torch.arange(held, device=dev)[None]
            valid = j < t[:, None]
            slot = t
        else:
            j = torch.arange(held, device=dev)[None]
            slot = t % w
            # The last W-1 steps; the ring slot about to be overwritten holds step t-W.
            valid = (j < torch.clamp(t, max=w)[:, None]) & ~(
                (t >= w)[:, None] & (j == slot[:, None])
            )
        past = [
            [(cache.kv[i, 0, :, :, :held], cache.kv[i, 1, :, :, :held], valid)] if held else []
            for i in range(cfg.n_layers)
        ]
        self_mask = torch.ones(1, 1, dtype=torch.bool, device=dev)
        h, kvs = self._run(x[:, None], t[:, None], past, self_mask)
        new = torch.stack([torch.stack(kv) for kv in kvs])[..., 0, :]  # (nl, 2, B, H, hd)
        cache.kv[:, :, rows, :, slot] = new.permute(2, 0, 1, 3, 4)
        cache.t += 1
        return h[:, 0]

    @torch.no_grad()
    def prefill(self, x: torch.Tensor) -> MemoCache:
        """The cache after stepping through x (B, T, d) from an empty cache, computed in chunks.

        Equal (to float tolerance) to ``T`` calls of ``step``; used to rebuild caches under new
        weights (KV refresh) without T sequential forwards.
        """
        cfg = self.cfg
        B, T, _ = x.shape
        dev = x.device
        cache = self.init_cache(B)
        if cfg.mode == "fct":
            _, kvs = self._run(
                x, torch.arange(T, device=dev), None, _causal(T, dev, cfg.fct_window)
            )
            new = torch.stack([torch.stack(kv) for kv in kvs])  # (nl, 2, B, H, T, hd)
            if cfg.fct_window is None:
                cache.kv = self._grow(cache.kv, 4, T)
                cache.kv[..., :T, :] = new
            else:
                steps = torch.arange(max(0, T - cfg.fct_window), T, device=dev)
                cache.kv[..., steps % cfg.fct_window, :] = new[..., steps, :]
            cache.t[:] = T
            return cache
        slots = self.slots.weight[None].expand(B, -1, -1)
        cap = cfg.summary_cap
        mem = x.new_zeros(B, 0, cfg.d_model)
        full = (T // cfg.l_seg) * cfg.l_seg
        for start in range(0, full, cfg.l_seg):
            n = mem.shape[1]
            inp = torch.cat([mem, x[:, start : start + cfg.l_seg], slots], dim=1)
            h, _ = self._run(
                inp, torch.arange(inp.shape[1], device=dev), None, _causal(inp.shape[1], dev)
            )
            mem = torch.cat([mem, h[:, n + cfg.l_seg :]], dim=1)
            if cap is not None:
                mem = mem[:, -cap * cfg.l_sum :]
        n = mem.shape[1]
        inp = torch.cat([mem, x[:, full:]], dim=1)
        _, kvs = self._run(
            inp, torch.arange(inp.shape[1], device=dev), None, _causal(inp.shape[1], dev)
        )
        new = torch.stack([torch.stack(kv) for kv in kvs])  # (nl, 2, B, H, n + tail, hd)
        cache.sum_kv = self._grow(cache.sum_kv, 4, n)
        cache.sum_x = self._grow(cache.sum_x, 1, n)
        cache.sum_kv[..., :n, :] = new[..., :n, :]
        cache.sum_x[:, :n] = mem
        cache.seg_kv[..., : T - full, :] = new[..., n:, :]
        cache.n_sum[:] = n
        cache.seg_len[:] = T - full
        return cache

    # -------------------------------------------------------- cache keeping
    def reset_cache(self, cache: MemoCache, envs: torch.Tensor) -> None:
        """Empties the cache rows of ``envs`` (long indices): their trials start anew."""
        if cache.t is not None:
            cache.t[envs] = 0
        else:
            cache.n_sum[envs] = 0
            cache.seg_len[envs] = 0

    def copy_cache_row(self, src: MemoCache, src_row: int, dst: MemoCache, dst_row: int) -> None:
        """Copies one env's cache from ``src`` into row ``dst_row`` of ``dst`` (growing it)."""
        if src.t is not None:
            t = int(src.t[src_row])
            length = min(t, src.kv.shape[4])
            dst.kv = self._grow(dst.kv, 4, length)
            dst.kv[:, :, dst_row, :, :length] = src.kv[:, :, src_row, :, :length]
            dst.t[dst_row] = t
            return
        n, s = int(src.n_sum[src_row]), int(src.seg_len[src_row])
        dst.sum_kv = self._grow(dst.sum_kv, 4, n)
        dst.sum_x = self._grow(dst.sum_x, 1, n)
        dst.sum_kv[:, :, dst_row, :, :n] = src.sum_kv[:, :, src_row, :, :n]
        dst.sum_x[dst_row, :n] = src.sum_x[src_row, :n]
        dst.seg_kv[:, :, dst_row, :, :s] = src.seg_kv[:, :, src_row, :, :s]
        dst.n_sum[dst_row], dst.seg_len[dst_row] = n, s

    def cache_tokens(self, cache: MemoCache) -> int:
        """Tokens held in the cache per env (the most over the batch's envs)."""
        if cache.t is not None:
            held = (
                cache.t if self.cfg.fct_window is None else cache.t.clamp(max=self.cfg.fct_window)
            )
        else:
            held = cache.n_sum + cache.seg_len
        return int(held.max()) if held.numel() else 0

    def cache_bytes(self, cache: MemoCache) -> int:
        """Bytes of K/V held per env (the most over the batch's envs)."""
        cfg = self.cfg
        elem = self.slots.weight.element_size()
        return self.cache_tokens(cache) * cfg.n_layers * 2 * cfg.d_model * elem
