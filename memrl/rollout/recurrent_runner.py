"""``RecurrentBulkEnvRunner``: the bulk runner for RLlib's stateful modules (its default LSTM).

Each vector step runs the module on (N, 1, *obs_shape) with every env's recurrent state, which
is reset to the module's initial state where a trial starts (as RLlib's episode path gives a new
episode the initial state). The state each row acted from goes into the rollout, so the learner
can start its training sequences from it (``Rollout.extras``):

- ``state_in``: {name: (T, N, *state_shape)} the state row t acted from;
- ``state_last``: {name: (N, *state_shape)} the state after the last row (with ``obs[T]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns

from memrl.rollout.arrays import Rollout
from memrl.rollout.env_runner import BulkEnvRunner

STATE_IN = "state_in"
"""Rollout extra: the recurrent state each row acted from."""
STATE_LAST = "state_last"
"""Rollout extra: the recurrent state after the rollout's last row."""


class RecurrentBulkEnvRunner(BulkEnvRunner):
    """BulkEnvRunner for RLlib's stateful modules; see the module docstring."""

    def _reset_all(self) -> None:
        super()._reset_all()
        initial = self.module.get_initial_state()
        self._initial = {k: np.asarray(v, np.float32) for k, v in initial.items()}
        self._state = {k: np.repeat(v[None], self.num_envs, 0) for k, v in self._initial.items()}
        self._rows: dict[int, dict[str, np.ndarray]] = {}

    def _sample_rollout(self, num_timesteps: int, explore: bool, force_reset: bool) -> Any:
        rollout = super()._sample_rollout(num_timesteps, explore, force_reset)
        steps = rollout.num_steps
        rollout.extras[STATE_IN] = {
            k: np.stack([self._rows[t][k] for t in range(steps)]) for k in self._state
        }
        rollout.extras[STATE_LAST] = {k: v.copy() for k, v in self._state.items()}
        self._rows = {}
        return rollout

    def _module_inputs(self, rollout: Rollout, t: int) -> dict[str, Any]:
        starts = rollout.valid[t] & (rollout.trial_t[t] == 0)
        if starts.any():
            for k, v in self._state.items():
                v[starts] = self._initial[k]
        self._rows[t] = {k: v.copy() for k, v in self._state.items()}
        obs = torch.from_numpy(rollout.obs[t]).to(self._device)
        return {
            Columns.OBS: obs[:, None],  # (N, 1, *obs_shape): one time step
            Columns.STATE_IN: {
                k: torch.from_numpy(v).to(self._device) for k, v in self._state.items()
            },
        }

    def _after_forward(self, out: dict[str, Any]) -> None:
        self._state = {
            k: v.detach().cpu().numpy().astype(np.float32, copy=False)
            for k, v in out[Columns.STATE_OUT].items()
        }
