"""Env-runner side of Memo: one KV cache per vector-env slot, kept outside RLlib's episode data.

RLlib stores a stateful module's STATE_OUT at every timestep and restarts training rows from it;
a KV cache does not belong there. Instead the RLModule on an env runner owns a ``MemoCacheKeeper``:
row i of every inference batch is vector-env slot i (RLlib's env runner builds its batch from
its episodes in slot order), and the ``memo_trial_t`` column that ``MemoTrialStep`` adds tells the
keeper the step of each row's trial (0: a new trial, the row's cache is emptied).

The keeper also stores every ongoing trial's per-step inputs of the trainable encoder, so that
after new weights arrive ``refresh`` rebuilds each cache as the new weights would have built it
(the Memo paper's KV refresh). Those inputs are the raw observations, or, for a module with a
frozen image encoder, the frozen image features (computed once, when the step was taken) next to
the observation's other parts: the refresh then runs only the trainable layers and never encodes
an image again.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn

from memrl.methods.memo.cache import MemoCache
from memrl.methods.memo.network import MemoTransformer

logger = logging.getLogger(__name__)


class MemoCacheKeeper:
    """Batched caches and stored inputs of the trials an env runner is stepping."""

    def __init__(self, encoder: nn.Module, net: MemoTransformer) -> None:
        self.encoder = encoder  # the trainable encoder: inputs -> (..., d_model) tokens
        self.net = net
        self.cache: MemoCache | None = None
        self.inputs: torch.Tensor | None = None  # (B, capacity, in_dim) the encoder's inputs
        self.lengths: np.ndarray | None = None  # (B,) steps stored per slot (host)
        self.peak_tokens = 0  # most K/V tokens any env's cache held since `take_peak`

    @torch.no_grad()
    def step(
        self, obs: torch.Tensor, trial_t: torch.Tensor | np.ndarray, seg_len: int | None = None
    ) -> torch.Tensor:
        """Features of one step for every slot.

        Args:
            obs: (B, in_dim) the slots' current encoder inputs (observations, or frozen image
                features + the other observation parts); stored for the KV refresh.
            trial_t: (B,) the step index of each observation within its trial.
            seg_len: the segment length to step with (default l_seg); when it differs from the
                caches', ongoing trials are rebuilt with it first (as a refresh would).

        Returns:
            (B, d_model) features.
        """
        B = obs.shape[0]
        if isinstance(trial_t, torch.Tensor):
            trial_t = trial_t.cpu().numpy()
        trial_t = np.asarray(trial_t, np.int64).reshape(B)
        seg_len = seg_len or self.net.cfg.l_seg
        if self.cache is None or self.cache.batch_size != B:
            if self.cache is not None and (trial_t != 0).any():
                raise RuntimeError(
                    f"Memo: the env runner's batch changed from "
                    f"{self.cache.batch_size} to {B} rows mid-trial"
                )
            self.cache = self.net.init_cache(B, seg_len)
            self.inputs = obs.new_zeros(B, 64, obs.shape[1])
            self.lengths = np.zeros(B, np.int64)
        elif self.cache.l_seg and self.cache.l_seg != seg_len:
            self.refresh(seg_len)
        new = np.flatnonzero(trial_t == 0)
        if len(new):
            self.net.reset_cache(self.cache, new)
            self.lengths[new] = 0
        if not np.array_equal(self.lengths, trial_t):
            bad = np.flatnonzero(self.lengths != trial_t).tolist()
            raise RuntimeError(
                f"Memo: cache out of step with the trials in slots {bad}: cached "
                f"{self.lengths[bad].tolist()} steps, trials at {trial_t[bad].tolist()}"
            )
        need = int(self.lengths.max()) + 1
        if need > self.inputs.shape[1]:
            grow = self.inputs.new_zeros(
                B, max(need, 2 * self.inputs.shape[1]) - self.inputs.shape[1], self.inputs.shape[2]
            )
            self.inputs = torch.cat([self.inputs, grow], dim=1)
        if self.lengths.min() == self.lengths.max():  # lockstep: one slice, no index tensors
            self.inputs[:, int(self.lengths[0])] = obs
        else:
            rows = torch.arange(B, device=obs.device)
            self.inputs[rows, torch.as_tensor(self.lengths, device=obs.device)] = obs
        self.lengths += 1
        features, self.cache = self.net.step(self.encoder(obs), self.cache)
        self.peak_tokens = max(self.peak_tokens, self.net.cache_tokens(self.cache))
        return features

    def take_peak(self) -> tuple[int, int]:
        """(tokens, bytes) of K/V that one env's cache held at most since the last call (the
        training run logs them per sampling round); resets the count."""
        tokens, self.peak_tokens = self.peak_tokens, 0
        return tokens, self.net.kv_bytes(tokens)

    def forget(self, slots: np.ndarray) -> None:
        """Empties the caches of ``slots`` (indices) whose trials have ended: a refresh skips
        them, and their next step must be a trial's first (``trial_t`` 0)."""
        if self.cache is None or not len(slots):
            return
        self.net.reset_cache(self.cache, slots)
        self.lengths[slots] = 0

    @torch.no_grad()
    def refresh(self, seg_len: int | None = None) -> None:
        """Recomputes every ongoing trial's cache from its stored inputs with current weights
        (and ``seg_len``, default: the caches' own segment length)."""
        if self.cache is None:
            return
        seg_len = seg_len or self.cache.l_seg or None
        if self.net.cfg.mode != "fct" and seg_len != self.cache.l_seg:
            self.cache = self.net.init_cache(self.cache.batch_size, seg_len)
        self.net.reset_cache(self.cache, np.flatnonzero(self.lengths == 0))
        # Slots at the same step (all of them, when trials run in lockstep) share one prefill.
        for n in np.unique(self.lengths[self.lengths > 0]):
            rows = np.flatnonzero(self.lengths == n)
            index = torch.as_tensor(rows, device=self.inputs.device)
            tokens = self.encoder(self.inputs[index, : int(n)])  # (E, n, d)
            fresh = self.net.prefill(tokens, seg_len)
            for i, row in enumerate(rows):
                self.net.copy_cache_row(fresh, i, self.cache, int(row))
        logger.debug("Memo KV refresh of %d slots", self.cache.batch_size)
