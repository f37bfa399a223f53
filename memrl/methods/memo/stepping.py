"""Memo's cached step: one env step for a batch of envs with a KV cache (``MemoStepping``, a
mixin of ``MemoTransformer``, which brings the layers, RoPE tables and write plans it runs).

Memo's cache holds the K/V of the kept summaries plus those of the current segment, so at most
``n*l_sum + l_seg`` tokens. At a segment's last step the summary slots are run against the cache,
their normed outputs are run once more through all layers against the old summary K/V only
(positions continuing after them), and the result replaces the segment's K/V. When a summary block
is evicted (``max_summaries``, ``rmt``), the kept summaries are re-encoded from their stored input
vectors at positions from 0, exactly as the training forward sees them.

The cache keeps each layer's K/V in one buffer, per env ``[summaries | current segment]`` (fct:
its steps). A step writes its token's K/V into the buffer first, at the index that is also its
RoPE position, then each layer attends once over the buffer's prefix. Envs in one batch may be at
different steps of their trials: when all hold the same counts (lockstep, e.g. trials started
together) the step uses slices and no mask; otherwise per-row scatters and a key mask, still
vectorized (no Python loop over envs). ``prefill`` builds the cache a run of steps would leave
(KV refresh); ``reset_cache`` / ``copy_cache_row`` / ``cache_tokens`` keep it per env.
"""

from __future__ import annotations

import numpy as np
import torch

from memrl.methods.memo.cache import MemoCache, WritePlan, grow
from memrl.methods.memo.layers import visible_mask


class MemoStepping:
    """The cached-step half of ``MemoTransformer``; see the module docstring."""

    def init_cache(self, batch_size: int, seg_len: int | None = None) -> MemoCache:
        """An empty cache for ``batch_size`` envs; memo/rmt segments of ``seg_len`` steps
        (default ``l_seg``)."""
        cfg = self.cfg
        p = self.slots.weight
        zeros = np.zeros(batch_size, np.int64)
        if cfg.mode == "fct":
            cap = cfg.fct_window or 64
            return MemoCache(kv=self._kv_buffer(batch_size, cap), t=zeros)
        l_seg = seg_len or cfg.l_seg
        if l_seg < 1:
            raise ValueError(f"seg_len must be >= 1, got {l_seg}")
        cap = cfg.summary_cap
        c = cap * cfg.l_sum if cap is not None else 4 * cfg.l_sum
        return MemoCache(
            kv=self._kv_buffer(batch_size, c + l_seg + cfg.l_sum),
            l_seg=l_seg,
            sum_x=p.new_zeros(batch_size, c, cfg.d_model),
            n_sum=zeros,
            seg_len=zeros.copy(),
        )

    def _kv_buffer(self, batch_size: int, length: int) -> torch.Tensor:
        cfg = self.cfg
        return self.slots.weight.new_zeros(
            cfg.n_layers, 2, batch_size, cfg.n_heads, length, cfg.head_dim
        )

    @torch.no_grad()
    def step(self, x: torch.Tensor, cache: MemoCache) -> tuple[torch.Tensor, MemoCache]:
        """One env step for every env of the batch.

        Each layer writes the new token's K/V into the cache, then attends once over the prefix
        of its row's buffer. When every env holds the same counts (lockstep, the usual case)
        that is a slice and no mask; otherwise a (B, 1, 1, T) key mask. The counters live on the
        host, so nothing is read back from the device.

        Args:
            x: (B, d_model) the step tokens.
            cache: the envs' cache (updated in place and returned).

        Returns:
            (B, d_model) features of this step, and the cache.
        """
        cfg = self.cfg
        B = x.shape[0]
        fct = cfg.mode == "fct"
        w = cfg.fct_window
        # memo: the new token's buffer index is also its position (summaries, then the segment).
        pos = cache.t if fct else cache.n_sum + cache.seg_len  # (B,) host
        lo, hi = int(pos.min()), int(pos.max())
        if not fct:
            s_lo, s_hi = int(cache.seg_len.min()), int(cache.seg_len.max())
            need = hi + 1 + cfg.l_sum  # room for the summary slots at a segment end
        else:
            need = hi + 1 if w is None else w
        if cache.kv.shape[4] < need:
            cache.kv = grow(cache.kv, 4, need)
        if lo == hi:  # lockstep: slices, no mask
            slot = lo % w if fct and w is not None else lo
            keys = min(lo + 1, w) if fct and w is not None else lo + 1
            where = WritePlan(slot, keys)
            cos, sin = self._rope(lo, 1, hi + 1)
        else:
            slot, held = pos, pos + 1
            keys = hi + 1
            if fct and w is not None:
                slot, held, keys = pos % w, np.minimum(held, w), min(keys, w)
            held_t = torch.as_tensor(held, device=x.device)
            mask = torch.arange(keys, device=x.device) < held_t[:, None]
            where = self._where(slot, 1, keys, B, mask=mask[:, None, None, :])
            cos, sin = self._rope(pos, 1, hi + 1)
        h, _ = self._layers(x[:, None], cos, sin, kv=cache.kv, where=where)
        if fct:
            cache.t += 1
            return h[:, 0], cache
        cache.seg_len += 1
        if s_hi == cache.l_seg - 1:  # some segment is full
            everyone = s_lo == s_hi
            self._write_summaries(cache, lo - s_lo if everyone and lo == hi else None)
        return h[:, 0], cache

    def _write_summaries(self, cache: MemoCache, n_lock: int | None) -> None:
        """Segment end for the envs whose segment is full.

        ``n_lock``: every env ends its segment holding this many summary tokens (slices, no
        gathers); None: the general case. The summary slots attend to the summaries and the
        segment; their normed outputs run again against the old summaries only, at positions
        continuing after them, and those K/V replace the segment's.
        """
        cfg = self.cfg
        Ls, Lg = cfg.l_sum, cache.l_seg
        B = cache.batch_size
        dev = cache.kv.device
        if n_lock is not None:
            envs, n, n_hi = None, n_lock, n_lock
        else:
            envs = np.flatnonzero(cache.seg_len == Lg)
            n = cache.n_sum[envs]  # (E,) host
            n_hi = int(n.max())
            if len(envs) == B:
                envs = None
        E = B if envs is None else len(envs)
        ar = torch.arange(Ls, device=dev)
        keys = n_hi + Lg + Ls
        slots = self.slots.weight[None].expand(E, -1, -1)
        where = self._where(n + Lg, Ls, keys, B, envs, visible_mask(n + Lg, keys, ar))
        cos, sin = self._rope(n + Lg, Ls, keys)
        summaries, _ = self._layers(slots, cos, sin, kv=cache.kv, where=where)  # (E, Ls, d)

        cap = cfg.summary_cap
        full = None if cap is None else cap * Ls
        if isinstance(n, int):
            if full is None or n < full:
                self._append_summaries(cache, summaries, None, n)
            else:
                self._reencode_summaries(cache, summaries, None)
        else:
            rows = envs if envs is not None else np.arange(B)
            evict = n >= full if full is not None else np.zeros(len(n), bool)
            kept = np.flatnonzero(~evict)
            if len(kept):
                pick = torch.as_tensor(kept, device=dev)
                self._append_summaries(cache, summaries[pick], rows[kept], n[kept])
            dropped = np.flatnonzero(evict)
            if len(dropped):
                pick = torch.as_tensor(dropped, device=dev)
                self._reencode_summaries(cache, summaries[pick], rows[dropped])
        if envs is None:
            cache.seg_len[:] = 0
        else:
            cache.seg_len[envs] = 0

    def _append_summaries(
        self,
        cache: MemoCache,
        summaries: torch.Tensor,
        rows: np.ndarray | None,
        n: int | np.ndarray,
    ) -> None:
        """Appends a summary block after the n summaries the rows hold (rows None: all)."""
        Ls = self.cfg.l_sum
        B = cache.batch_size
        n_hi = n if isinstance(n, int) else int(n.max())
        cache.sum_x = grow(cache.sum_x, 1, n_hi + Ls)
        ar = torch.arange(Ls, device=summaries.device)
        keys = n_hi + Ls
        where = self._where(n, Ls, keys, B, rows, visible_mask(n, keys, ar))
        cos, sin = self._rope(n, Ls, keys)
        self._layers(summaries, cos, sin, kv=cache.kv, where=where)
        if where.index is None:
            cache.sum_x[:, n : n + Ls] = summaries
            cache.n_sum += Ls
        else:
            r, idx = where.index
            cache.sum_x[r, idx] = summaries
            cache.n_sum[rows if rows is not None else slice(None)] += Ls

    def _reencode_summaries(
        self, cache: MemoCache, summaries: torch.Tensor, rows: np.ndarray | None
    ) -> None:
        """Full memory: drops the oldest block, re-encodes the kept ones from position 0."""
        cfg = self.cfg
        Ls, total = cfg.l_sum, cfg.summary_cap * cfg.l_sum
        r = None if rows is None else torch.as_tensor(rows, device=cache.kv.device)
        old = cache.sum_x[:, Ls:total] if r is None else cache.sum_x[r, Ls:total]
        mem = torch.cat([old, summaries], dim=1)
        _, kvs = self._causal_run(mem, collect=True)
        new = torch.stack([torch.stack(kv) for kv in kvs])  # (nl, 2, E, H, total, hd)
        if r is None:
            cache.kv[..., :total, :] = new
            cache.sum_x[:, :total] = mem
        else:
            cache.kv[:, :, r, :, :total] = new
            cache.sum_x[r, :total] = mem

    @torch.no_grad()
    def prefill(self, x: torch.Tensor, seg_len: int | None = None) -> MemoCache:
        """The cache after stepping through x (B, T, d) from an empty cache, computed in chunks.

        Equal (to float tolerance) to ``T`` calls of ``step`` on ``init_cache(B, seg_len)``;
        used to rebuild caches under new weights (KV refresh) without T sequential forwards.
        """
        cfg = self.cfg
        B, T, _ = x.shape
        dev = x.device
        cache = self.init_cache(B, seg_len)
        if cfg.mode == "fct":
            _, kvs = self._causal_run(x, collect=True)
            new = torch.stack([torch.stack(kv) for kv in kvs])  # (nl, 2, B, H, T, hd)
            if cfg.fct_window is None:
                cache.kv = grow(cache.kv, 4, T)
                cache.kv[..., :T, :] = new
            else:
                steps = torch.arange(max(0, T - cfg.fct_window), T, device=dev)
                cache.kv[..., steps % cfg.fct_window, :] = new[..., steps, :]
            cache.t[:] = T
            return cache
        Lg = cache.l_seg
        slots = self.slots.weight[None].expand(B, -1, -1)
        cap = cfg.summary_cap
        mem = x.new_zeros(B, 0, cfg.d_model)
        full = (T // Lg) * Lg
        for start in range(0, full, Lg):
            n = mem.shape[1]
            h, _ = self._causal_run(torch.cat([mem, x[:, start : start + Lg], slots], 1))
            mem = torch.cat([mem, h[:, n + Lg :]], dim=1)
            if cap is not None:
                mem = mem[:, -cap * cfg.l_sum :]
        n = mem.shape[1]
        held = n + T - full
        _, kvs = self._causal_run(torch.cat([mem, x[:, full:]], dim=1), collect=True)
        new = torch.stack([torch.stack(kv) for kv in kvs])  # (nl, 2, B, H, n + tail, hd)
        cache.kv = grow(cache.kv, 4, held + cfg.l_sum)
        cache.sum_x = grow(cache.sum_x, 1, n)
        cache.kv[..., :held, :] = new
        cache.sum_x[:, :n] = mem
        cache.n_sum[:] = n
        cache.seg_len[:] = T - full
        return cache

    # -------------------------------------------------------- cache keeping
    def reset_cache(self, cache: MemoCache, envs: np.ndarray | torch.Tensor) -> None:
        """Empties the cache rows of ``envs`` (indices): their trials start anew."""
        rows = envs.cpu().numpy() if isinstance(envs, torch.Tensor) else np.asarray(envs)
        if cache.t is not None:
            cache.t[rows] = 0
        else:
            cache.n_sum[rows] = 0
            cache.seg_len[rows] = 0

    def copy_cache_row(self, src: MemoCache, src_row: int, dst: MemoCache, dst_row: int) -> None:
        """Copies one env's cache from ``src`` into row ``dst_row`` of ``dst`` (growing it).

        Both caches must use the same segment length."""
        if src.t is not None:
            t = int(src.t[src_row])
            length = min(t, src.kv.shape[4])
            dst.kv = grow(dst.kv, 4, length)
            dst.kv[:, :, dst_row, :, :length] = src.kv[:, :, src_row, :, :length]
            dst.t[dst_row] = t
            return
        if src.l_seg != dst.l_seg:
            raise ValueError(f"cannot copy a row of l_seg {src.l_seg} into a cache of {dst.l_seg}")
        n, s = int(src.n_sum[src_row]), int(src.seg_len[src_row])
        dst.kv = grow(dst.kv, 4, n + s + self.cfg.l_sum)
        dst.sum_x = grow(dst.sum_x, 1, n)
        dst.kv[:, :, dst_row, :, : n + s] = src.kv[:, :, src_row, :, : n + s]
        dst.sum_x[dst_row, :n] = src.sum_x[src_row, :n]
        dst.n_sum[dst_row], dst.seg_len[dst_row] = n, s

    def cache_tokens(self, cache: MemoCache) -> int:
        """Tokens held in the cache per env (the most over the batch's envs)."""
        if cache.t is not None:
            w = self.cfg.fct_window
            held = cache.t if w is None else np.minimum(cache.t, w)
        else:
            held = cache.n_sum + cache.seg_len
        return int(held.max()) if len(held) else 0

    def cache_bytes(self, cache: MemoCache) -> int:
        """Bytes of K/V held per env (the most over the batch's envs)."""
        return self.kv_bytes(self.cache_tokens(cache))

    def kv_bytes(self, tokens: int) -> int:
        """Bytes of K and V for ``tokens`` cached tokens of one env, over all layers."""
        cfg = self.cfg
        return tokens * cfg.n_layers * 2 * cfg.d_model * self.slots.weight.element_size()
