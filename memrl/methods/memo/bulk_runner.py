"""Memo on the bulk env runner: one batched transformer step over all envs per vector step.

The module's ``MemoCacheKeeper`` already holds every env's K/V in preallocated, batched tensors;
this runner gives it what RLlib's ``MemoTrialStep`` connector would (each row's step within its
trial, ``memo_trial_t``) straight from the runner's arrays, and keeps each ongoing trial's
observations since its first step, so a rollout that starts mid-trial carries the context the
learner rebuilds its rows from (``Rollout.extras``):

- ``memo_prefix_obs``: (N, P, *obs_shape) the observations of each env's trial before row 0
  (env n's first ``trial_t[0, n]`` entries; P is the longest);
- ``memo_seg_len``: the segment length the rollout was acted with.

A trial's cache is emptied as soon as the trial ends: the reset row that follows (whose action
the env ignores) is acted on as a new trial's first step, and new weights arriving between the
end and that row do not rebuild (KV refresh) caches that are about to be dropped; with trials
that end together at the rollout's end (``train_batch_size`` a multiple of the envs times the
trial length) the refresh has nothing to rebuild.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memrl.methods.memo.columns import MEMO_PREFIX_OBS, MEMO_SEG_LEN, MEMO_TRIAL_T
from memrl.rollout.arrays import Rollout
from memrl.rollout.env_runner import BulkEnvRunner


class MemoBulkEnvRunner(BulkEnvRunner):
    """BulkEnvRunner for MemoRLModule; see the module docstring."""

    def _sample_rollout(self, num_timesteps: int, explore: bool, force_reset: bool) -> Any:
        if force_reset or self._next_obs is None:
            self._reset_all()
        # The trials' steps before this rollout: the context its first rows continue.
        starts = np.where(self._done, 0, self._trial_t)
        width = int(starts.max()) if len(starts) else 0
        prefix = self._history[:, :width].copy()
        seg = self.module.memo_cfg.l_seg if not explore else self.module._acting_seg
        rollout = super()._sample_rollout(num_timesteps, explore, force_reset=False)
        rollout.extras[MEMO_PREFIX_OBS] = prefix
        rollout.extras[MEMO_SEG_LEN] = int(seg)
        return rollout

    def _reset_all(self) -> None:
        super()._reset_all()
        horizon = max(1, int(self.config.episode_lookback_horizon))
        space = self.env.single_observation_space
        self._history = np.zeros((self.num_envs, horizon + 1, *space.shape), space.dtype)

    def _module_inputs(self, rollout: Rollout, t: int) -> dict[str, Any]:
        batch = super()._module_inputs(rollout, t)
        trial_t = rollout.trial_t[t]
        if int(trial_t.max()) >= self._history.shape[1]:
            raise ValueError(
                f"a trial ran past {self._history.shape[1] - 1} steps, the longest Memo keeps "
                "for the learner; set model.max_trial_len to the env's longest trial"
            )
        self._history[np.arange(self.num_envs), trial_t] = rollout.obs[t]
        # Reset rows (trial over) restart their cache: nothing acted there is kept.
        batch[MEMO_TRIAL_T] = np.where(rollout.valid[t], trial_t, 0).astype(np.int64)
        return batch

    def set_state(self, state: dict[str, Any]) -> None:
        keeper = getattr(self.module, "_keeper", None)
        if keeper is not None and self._next_obs is not None:
            keeper.forget(np.flatnonzero(self._done))  # not rebuilt under the new weights
        super().set_state(state)
