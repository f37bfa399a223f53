"""MemoryCorridor: a passive T-maze, the cleanest test that a policy remembers.

An inner episode shows a cue (left or right) at its first step only. The agent is then carried
along a corridor for ``length`` steps with nothing to see (its actions there change nothing), and at
the junction its action picks an arm: +1 for the arm the cue named, -1 for the other, which ends
the inner episode. The cue therefore has to be remembered over ``length`` steps; a memoryless policy
is at chance (success 50%, mean reward 0). A trial (one env episode, one RLlib episode) holds
``episodes_per_trial`` inner episodes, each with a fresh cue.

Observation (float32): ``[cue_left, cue_right, at_junction, prev_action one-hot (2), prev_reward,
episode_start]``; the cue entries are zero except at an inner episode's first step.
Actions: 0 left, 1 right (ignored in the corridor).
Info: ``inner_episode`` and ``inner_episode_step``; at the junction step
``inner_episode_done=True``, ``inner_episode_return`` and ``inner_episode_success``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

NUM_ACTIONS = 2
OBS_DIM = 7


class MemoryCorridorEnv(gym.Env):
    """Passive T-maze with a cue at the start and a choice after ``length`` blank steps."""

    metadata = {"render_modes": []}
    # The best inner-episode success rate a policy without memory can reach (a coin flip at the
    # junction); the training summary sets the agent's success against it.
    memoryless_success = 0.5

    def __init__(self, length: int = 32, episodes_per_trial: int = 1) -> None:
        for name, value, low in (
            ("length", length, 0),
            ("episodes_per_trial", episodes_per_trial, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"MemoryCorridor {name} must be an int >= {low}, got {value!r}")
        self.length = length
        self.episodes_per_trial = episodes_per_trial
        self.trial_len = episodes_per_trial * (length + 1)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(OBS_DIM,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self._cue = 0
        self._t = 0
        self._inner = 0

    @property
    def cue(self) -> int:
        """The arm (0 left, 1 right) the current inner episode's cue names."""
        return self._cue

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._inner = 0
        self._new_inner_episode()
        return self._obs(None, 0.0), self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = int(action)
        if not 0 <= action < NUM_ACTIONS:
            raise ValueError(f"action must be 0 (left) or 1 (right), got {action}")
        if self._t < self.length:
            self._t += 1
            return self._obs(action, 0.0), 0.0, False, False, self._info()
        success = action == self._cue
        reward = 1.0 if success else -1.0
        info = self._info()
        info.update(
            inner_episode_done=True, inner_episode_return=reward, inner_episode_success=success
        )
        self._inner += 1
        terminated = self._inner >= self.episodes_per_trial
        if not terminated:
            self._new_inner_episode()
        return self._obs(action, reward), reward, terminated, False, info

    def _new_inner_episode(self) -> None:
        self._cue = int(self.np_random.integers(0, 2))
        self._t = 0

    def _obs(self, prev_action: int | None, prev_reward: float) -> np.ndarray:
        obs = np.zeros(OBS_DIM, np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
            obs[6] = 1.0
        if self._t == self.length:
            obs[2] = 1.0
        if prev_action is not None:
            obs[3 + prev_action] = 1.0
        obs[5] = prev_reward
        return obs

    def _info(self) -> dict[str, Any]:
        return {"inner_episode": self._inner, "inner_episode_step": self._t}
