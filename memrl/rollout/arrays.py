"""``Rollout``: one env runner's sample as time-major (T, N) arrays, what the bulk learner reads.

Row ``t`` of env ``n`` is one vector-env step: the policy saw ``obs[t, n]``, chose
``actions[t, n]`` and got ``rewards[t, n]``. The vector envs reset in gymnasium's NEXT_STEP mode:
the step after a trial ends only resets that env (its action is ignored, reward 0). Such a row is
not an env step (``valid`` is False) and no loss reads it, but its observation is the trial's
final one, so the value computed there is the bootstrap value of a truncated trial.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

ACTED_BEHIND = "acted_behind"
"""``Rollout.extras`` key: True when the rollout was acted by weights older than those of the
learner that trains on it (overlapped sampling, one version behind); a learner that knows it may
correct for it (Memo's: decoupled PPO)."""


@dataclass
class Rollout:
    """A bulk rollout of ``T`` vector steps over ``N`` envs (see the module docstring)."""

    obs: np.ndarray
    """(T + 1, N, *obs_shape): what the policy saw at each step, then the observation after the
    last step (the bootstrap of the rollout's end)."""
    actions: np.ndarray
    """(T, N, *action_shape) actions sent to the env."""
    logp: np.ndarray
    """(T, N) float32 log-probability of each action under the acting policy."""
    dist_inputs: np.ndarray
    """(T, N, D) float32 action-distribution inputs (logits) of the acting policy."""
    rewards: np.ndarray
    """(T, N) float32 rewards."""
    terminated: np.ndarray
    """(T, N) bool: the trial ended at this step (nothing after it is worth anything)."""
    truncated: np.ndarray
    """(T, N) bool: the trial was cut at this step (the next observation's value is its
    bootstrap)."""
    valid: np.ndarray
    """(T, N) bool: a real env step, False on the reset row after a trial's end."""
    inner_done: np.ndarray
    """(T, N) bool: an inner episode of the trial ended at this step (envs that report
    ``inner_episode_done``); trial ends are in ``terminated`` / ``truncated``."""
    trial_t: np.ndarray
    """(T, N) int32: the step of ``obs[t]`` within its trial (0: the trial's first observation;
    on a reset row, the ended trial's length)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Model-specific arrays (e.g. recurrent state at the rollout's start), by name."""

    @classmethod
    def empty(
        cls, steps: int, num_envs: int, obs_space: Any, action_space: Any, dist_dim: int
    ) -> Rollout:
        """Arrays for ``steps`` vector steps, allocated once (filled in place by the runner)."""
        t, n = steps, num_envs
        return cls(
            obs=np.zeros((t + 1, n, *obs_space.shape), obs_space.dtype),
            actions=np.zeros((t, n, *action_space.shape), action_space.dtype),
            logp=np.zeros((t, n), np.float32),
            dist_inputs=np.zeros((t, n, dist_dim), np.float32),
            rewards=np.zeros((t, n), np.float32),
            terminated=np.zeros((t, n), bool),
            truncated=np.zeros((t, n), bool),
            valid=np.zeros((t, n), bool),
            inner_done=np.zeros((t, n), bool),
            trial_t=np.zeros((t, n), np.int32),
        )

    @property
    def num_steps(self) -> int:
        """T, vector steps (rows) per env."""
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        return int(self.rewards.shape[1])

    def truncate(self, steps: int) -> Rollout:
        """The first ``steps`` rows (views; ``obs`` keeps one more for the bootstrap)."""
        return Rollout(
            obs=self.obs[: steps + 1],
            actions=self.actions[:steps],
            logp=self.logp[:steps],
            dist_inputs=self.dist_inputs[:steps],
            rewards=self.rewards[:steps],
            terminated=self.terminated[:steps],
            truncated=self.truncated[:steps],
            valid=self.valid[:steps],
            inner_done=self.inner_done[:steps],
            trial_t=self.trial_t[:steps],
            extras=dict(self.extras),
        )

    def env_steps(self) -> int:
        """Env steps in the rollout (reset rows excluded), as RLlib counts them."""
        return int(self.valid.sum())

    def agent_steps(self) -> int:
        return self.env_steps()

    def __len__(self) -> int:
        return self.env_steps()


def as_tensor(x: np.ndarray, device: Any = None) -> torch.Tensor:
    """A rollout array as a tensor, without a copy unless the array is read-only (as arrays
    from a remote runner arrive: Ray's zero-copy buffers, which torch must not alias)."""
    return torch.from_numpy(x if x.flags.writeable else x.copy()).to(device)
