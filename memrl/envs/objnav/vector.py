"""ObjNavVectorEnv: ObjNav-lite as a native gymnasium VectorEnv (NEXT_STEP autoreset).

One ``ObjNavVec`` steps all envs at once; the only per-env Python work is drawing a new start and
target when an inner episode ends (a few random numbers) and a new layout when a trial ends.
Env i produces the same trajectories as ``ObjNavEnv`` seeded with ``seed + i``: each env draws
its starts and layouts from its own two generators, spawned exactly as ``ObjNavVec(1)`` spawns
them, instead of the batched core's one shared start generator.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from memrl.envs.objnav.config import ObjNavConfig
from memrl.envs.objnav.core import NUM_ACTIONS, TURN_LEFT, ObjNavVec
from memrl.envs.vector_utils import check_actions, per_env_seeds


class _PerEnvRandomVec(ObjNavVec):
    """ObjNavVec whose env i draws from the generators an ``ObjNavVec(1)`` seeded seed_i has."""

    def seed_envs(self, seeds: list[int | None]) -> None:
        self._start_rngs = []
        self._layout_rngs = []
        for s in seeds:
            start, layout = np.random.SeedSequence(s).spawn(2)
            self._start_rngs.append(np.random.default_rng(start))
            self._layout_rngs.append(np.random.default_rng(layout))

    def _start_episodes(self, envs: np.ndarray) -> None:
        # Env by env, so that each consumes its own generator as a single env would.
        for i in np.asarray(envs, dtype=np.int64).tolist():
            self._rng = self._start_rngs[i]
            super()._start_episodes(np.array([i], dtype=np.int64))


class ObjNavVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` ObjNav-lite envs; keyword arguments are the ObjNavConfig fields.

    Autoreset follows gymnasium's NEXT_STEP mode (what RLlib's env runner expects): the step after
    a trial ends resets that env and returns its new trial's first observation (reward 0, not
    done; its action is ignored). Infos are gymnasium's vector dicts of arrays with ``_key``
    masks; unlike ``ObjNavEnv``, which reports ``inner_episode``/``target``/``distance`` at every
    step, only the envs whose inner episode ends report (``inner_episode``,
    ``inner_episode_done``, ``inner_episode_success``, ``inner_episode_spl``,
    ``inner_episode_return``, ``inner_episode_length``), and those whose trial ends add
    ``trial_episodes``, ``trial_success_rate``, ``trial_spl``, ``trial_return``.
    """

    metadata = {"render_modes": [], "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, **config: Any) -> None:
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        self.config = ObjNavConfig.from_kwargs(config)
        self.num_envs = num_envs
        self.vec = _PerEnvRandomVec(num_envs, self.config, autoreset=False)
        base = self.config.seed
        self.vec.seed_envs([None if base is None else base + i for i in range(num_envs)])
        low, high = self.vec.obs_bounds()
        self.single_observation_space = gym.spaces.Box(low=low, high=high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.spaces.MultiDiscrete(np.full(num_envs, NUM_ACTIONS))
        self.obs_slices = dict(self.vec.obs_slices)
        self.obs_shapes = {"view": self.vec.view_shape}
        self._needs_reset = np.zeros(num_envs, bool)
        self._started = False

    @property
    def trial_len(self) -> int:
        return self.config.trial_len

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts a new trial in every env; ``seed`` is an int (env i gets seed + i) or a list."""
        if seed is not None:
            self.vec.seed_envs(per_env_seeds(seed, self.num_envs))
        obs = self.vec.reset()
        self._needs_reset[:] = False
        self._started = True
        return obs.copy(), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = check_actions(
            actions,
            self.num_envs,
            NUM_ACTIONS,
            self._started,
            "ObjNavVectorEnv",
        )
        vec = self.vec
        restart = self._needs_reset.copy()
        # Envs whose trial ended last step only get reset; a turn there draws nothing random
        # (their trial is over, so no new inner episode starts) and their state is redrawn below.
        actions = np.where(restart, TURN_LEFT, actions).astype(np.int64)
        return_before = vec.episode_return.copy()
        res = vec.step(actions)
        live = ~restart
        reward = np.where(live, res.reward, 0.0).astype(np.float32)
        trial_done = live & res.trial_done
        ended = live & res.episode_done
        infos: dict[str, Any] = {}
        if ended.any():
            for key, value in (
                ("inner_episode", vec.episode_index.copy()),  # as ObjNavEnv: the one now running
                ("inner_episode_done", ended.copy()),
                ("inner_episode_success", res.success & ended),
                ("inner_episode_spl", np.where(ended, res.spl, 0.0)),
                ("inner_episode_return", np.where(ended, return_before + res.reward, 0.0)),
                ("inner_episode_length", np.where(ended, res.episode_length, 0)),
            ):
                infos[key] = value
                infos["_" + key] = ended
        if trial_done.any():
            episodes = vec.trial_episodes.copy()
            for key, value in (
                ("trial_episodes", episodes),
                ("trial_success_rate", vec.trial_successes / np.maximum(1, episodes)),
                ("trial_spl", vec.trial_spl / np.maximum(1, episodes)),
                ("trial_return", vec.trial_return.copy()),
            ):
                infos[key] = value
                infos["_" + key] = trial_done
        if restart.any():
            vec.reset_trials(np.flatnonzero(restart))
            vec._observe()  # rewrites res.obs (the core's buffer) with the new trials' first
        self._needs_reset = trial_done
        # A trial ends on time only: truncated, never terminated (as in the single env).
        return res.obs.copy(), reward, np.zeros(self.num_envs, bool), trial_done.copy(), infos
