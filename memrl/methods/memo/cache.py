"""Inference state of a MemoTransformer: the per-env KV cache and where one pass writes into it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class MemoCache:
    """Per-env inference state of a MemoTransformer (a batch of envs, one row each).

    ``kv`` (n_layers, 2, B, H, C, hd) holds every layer's K and V, one contiguous run of tokens per
    env row, already rotated by RoPE:

    - memo/rmt: ``[summaries | current segment]``: the K/V of the ``n_sum[b]`` summary tokens kept,
      then those of the ``seg_len[b]`` steps of the current segment (segments of ``l_seg`` steps).
      A step's token goes to index ``n_sum + seg_len``, which is also its RoPE position, and
      attends to the prefix up to it. ``sum_x`` (B, C', d) keeps the summaries' input vectors (to
      re-encode them on eviction).
    - fct: ``kv`` holds the steps seen, ``t`` (B,) counts them; with ``fct_window`` it is a ring
      buffer of that many steps (step s at index ``s % fct_window``).

    C is capacity: the buffers grow (doubling) when a step needs more; what an env holds is given
    by its counters, not by C. The counters are host (numpy int64) arrays, so a step decides what
    to do (lockstep or not, which segments end) without reading back from the device: no
    synchronisation per step on a GPU.
    """

    kv: torch.Tensor
    l_seg: int = 0
    t: np.ndarray | None = None
    n_sum: np.ndarray | None = None
    seg_len: np.ndarray | None = None
    sum_x: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        counter = self.t if self.t is not None else self.seg_len
        return int(counter.shape[0])

    @property
    def sum_kv(self) -> torch.Tensor:
        """memo/rmt: the K/V buffer; row b's summaries are ``[..., b, :, :n_sum[b], :]``."""
        return self.kv

    @property
    def seg_kv(self) -> torch.Tensor:
        """memo/rmt: a copy of each row's current-segment K/V (n_layers, 2, B, H, S, hd).

        S is the most steps any row holds; row b's steps are ``[..., b, :, :seg_len[b], :]``.
        """
        nl, two, B, H, C, hd = self.kv.shape
        S = int(self.seg_len.max()) if B else 0
        idx = torch.as_tensor(self.n_sum[:, None] + np.arange(S), device=self.kv.device)
        idx = idx.clamp(max=C - 1)[None, None, :, None, :, None].expand(nl, two, B, H, S, hd)
        return self.kv.gather(4, idx)


@dataclass
class WritePlan:
    """Where one pass writes its new tokens' K/V in a cache's ``kv`` and which keys it reads.

    ``rows`` None with an int ``start``: every row, the same indices (slice copies, no mask
    needed when ``mask`` is None). Otherwise ``index`` scatters per row.
    """

    start: int | torch.Tensor
    """Buffer index of the first new token: one for every row, or per row (E,)."""
    keys: int
    """Queries read the buffer's first ``keys`` tokens (of their rows)."""
    rows: torch.Tensor | None = None
    """Cache rows of the pass's batch (None: every row, in order)."""
    mask: torch.Tensor | None = None
    """bool, broadcastable to (E, 1, L, keys): True where a query may read a key."""
    index: tuple | None = None
    """(rows (E, 1), buffer indices (E, L)) of the new tokens, for per-row writes."""

    def write(
        self, kv: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Puts k, v (E, H, L, hd) into one layer's kv (2, B, H, C, hd); returns the keys read."""
        kb, vb = kv[0], kv[1]
        if self.index is None:
            end = self.start + k.shape[2]
            kb[:, :, self.start : end] = k
            vb[:, :, self.start : end] = v
        else:
            r, idx = self.index
            kb[r, :, idx] = k.transpose(1, 2)
            vb[r, :, idx] = v.transpose(1, 2)
        if self.rows is None:
            return kb[:, :, : self.keys], vb[:, :, : self.keys]
        return kb[self.rows, :, : self.keys], vb[self.rows, :, : self.keys]


def grow(buf: torch.Tensor, dim: int, need: int) -> torch.Tensor:
    """``buf`` with at least ``need`` entries along ``dim`` (doubling; new entries are zeros)."""
    have = buf.shape[dim]
    if need <= have:
        return buf
    shape = list(buf.shape)
    shape[dim] = max(need, 2 * have) - have
    return torch.cat([buf, buf.new_zeros(shape)], dim=dim)
