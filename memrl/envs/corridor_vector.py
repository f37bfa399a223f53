"""MemoryCorridorVectorEnv: the memory corridor as a native gymnasium VectorEnv (NEXT_STEP)."""

from __future__ import annotations

from typing import Any

import numpy as np

from memrl.envs.corridor import NUM_ACTIONS, OBS_DIM, MemoryCorridorEnv
from memrl.envs.vector_utils import NextStepVectorEnv, ending_infos


class MemoryCorridorVectorEnv(NextStepVectorEnv):
    """``num_envs`` memory corridors stepped together with numpy.

    The same observations, rewards and trial ends as ``num_envs`` copies of
    :class:`MemoryCorridorEnv` in gymnasium's ``SyncVectorEnv`` with NEXT_STEP autoreset, and the
    same cues for the same seeds (env ``i`` is seeded with ``seed + i`` and draws each inner
    episode's cue from its own generator, as the single env does). As in the Dark-Key-To-Door
    vector env, infos carry the inner-episode keys only for the envs whose inner episode ends at
    that step (``inner_episode``, ``inner_episode_step``, ``inner_episode_done``,
    ``inner_episode_return``, ``inner_episode_success``).
    """

    def __init__(self, num_envs: int, length: int = 32, episodes_per_trial: int = 1) -> None:
        proto = MemoryCorridorEnv(length, episodes_per_trial)  # validates the arguments
        self._setup(num_envs, proto.observation_space, NUM_ACTIONS)
        self.length, self.episodes_per_trial = length, episodes_per_trial
        self.trial_len = proto.trial_len
        self._cue = np.zeros(num_envs, np.int64)
        self._t = np.zeros(num_envs, np.int64)
        self._inner = np.zeros(num_envs, np.int64)

    @property
    def cue(self) -> np.ndarray:
        """(num_envs,) the arm each env's current cue names."""
        return self._cue.copy()

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts a new trial in every env; ``seed`` is an int (env i gets seed + i) or a list."""
        self._seed(seed)
        self._inner[:] = 0
        self._new_inner_episodes(np.arange(self.num_envs))
        return self._observe(np.full(self.num_envs, -1), np.zeros(self.num_envs)), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions, restart, live = self._begin_step(actions)
        n = self.num_envs
        walking = live & (self._t < self.length)
        choosing = live & ~walking
        success = choosing & (actions == self._cue)
        reward = np.where(choosing, np.where(success, 1.0, -1.0), 0.0)
        self._t[walking] += 1
        infos: dict[str, Any] = {}
        if choosing.any():
            ending = {
                "inner_episode": self._inner.copy(),
                "inner_episode_step": self._t.copy(),
                "inner_episode_done": choosing.copy(),
                "inner_episode_return": reward.copy(),
                "inner_episode_success": success.copy(),
            }
            infos = ending_infos(ending, choosing)
        self._inner[choosing] += 1
        terminated = choosing & (self._inner >= self.episodes_per_trial)
        self._new_inner_episodes(np.flatnonzero(choosing & ~terminated))
        if restart.any():
            envs = np.flatnonzero(restart)
            self._inner[envs] = 0
            self._new_inner_episodes(envs)
        self._needs_reset = terminated
        prev_action = np.where(live, actions, -1)
        obs = self._observe(prev_action, reward)
        return obs, reward, terminated.copy(), np.zeros(n, bool), infos

    def _new_inner_episodes(self, envs: np.ndarray) -> None:
        for i in envs:
            self._cue[i] = int(self._rngs[i].integers(0, 2))
        self._t[envs] = 0

    def _observe(self, prev_action: np.ndarray, prev_reward: np.ndarray) -> np.ndarray:
        """A fresh (num_envs, 7) array (RLlib keeps each row, so buffers are not reused)."""
        obs = np.zeros((self.num_envs, OBS_DIM), np.float32)
        first = np.flatnonzero(self._t == 0)
        obs[first, self._cue[first]] = 1.0
        obs[first, 6] = 1.0
        obs[:, 2] = self._t == self.length
        acted = np.flatnonzero(prev_action >= 0)
        obs[acted, 3 + prev_action[acted]] = 1.0
        obs[:, 5] = prev_reward
        return obs
