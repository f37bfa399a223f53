"""ObjNavEnv: the gymnasium face of ObjNav-lite (one env = ObjNavVec with N = 1).

One env episode is one trial (``trial_len`` steps in one layout); it ends with ``truncated=True``
(a time limit, never ``terminated``). Inner episodes start and end inside it; ``info`` says when:

- every step: ``inner_episode`` (index in the trial), ``inner_episode_step``, ``target``
  (category), ``distance`` (shortest-path cells to the nearest goal cell);
- the step that ends an inner episode: ``inner_episode_done=True``, ``inner_episode_success``,
  ``inner_episode_spl``, ``inner_episode_return``, ``inner_episode_length``;
- the trial's last step: ``trial_episodes`` (finished inner episodes), ``trial_success_rate``,
  ``trial_spl`` (means over them; an inner episode cut by the trial's end is not counted).

The observation layout is in ``memrl.envs.objnav.core`` and in ``env.obs_slices``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from memrl.envs.objnav.config import ObjNavConfig
from memrl.envs.objnav.core import NUM_ACTIONS, ObjNavVec


class ObjNavEnv(gym.Env):
    """ObjNav-lite: object-goal navigation in procedurally generated multi-room grid maps.

    Keyword arguments are the fields of ``ObjNavConfig`` (grid_size, rooms, num_categories,
    view_radius, view_half_angle, episode_len, trial_len, seed, ...).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, render_mode: str | None = None, cell_px: int = 12, **config: Any) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"ObjNav render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.config = ObjNavConfig.from_kwargs(config)
        self.render_mode = render_mode
        self.cell_px = cell_px
        self.vec = ObjNavVec(1, self.config, autoreset=False)
        self.obs_slices = dict(self.vec.obs_slices)
        self.view_shape = self.vec.view_shape
        self.obs_shapes = {"view": self.view_shape}  # parts with a shape (image-like)
        low, high = self.vec.obs_bounds()
        self.observation_space = gym.spaces.Box(low=low, high=high, dtype=np.float32)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self._started = False

    @property
    def trial_len(self) -> int:
        """Steps per trial (one gymnasium episode); Memo sizes its lookback buffer from it."""
        return self.config.trial_len

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts a new trial: a new layout and its first inner episode."""
        super().reset(seed=seed)
        if seed is not None:
            self.vec.seed(seed)
        obs = self.vec.reset()
        self._started = True
        return obs[0].copy(), self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise RuntimeError("ObjNavEnv.step called before reset(); call reset() first")
        if not self.action_space.contains(action):
            raise ValueError(f"ObjNav action must be an int in [0, {NUM_ACTIONS}), got {action!r}")
        vec = self.vec
        return_before = float(vec.episode_return[0])
        result = vec.step(np.array([action], dtype=np.int64))
        info = self._info()
        if result.episode_done[0]:
            info["inner_episode_done"] = True
            info["inner_episode_success"] = bool(result.success[0])
            info["inner_episode_spl"] = float(result.spl[0])
            info["inner_episode_length"] = int(result.episode_length[0])
            # The next inner episode has already started (its return is 0); add this last reward.
            info["inner_episode_return"] = return_before + float(result.reward[0])
        truncated = bool(result.trial_done[0])
        if truncated:
            episodes = int(vec.trial_episodes[0])
            info["trial_episodes"] = episodes
            info["trial_success_rate"] = float(vec.trial_successes[0] / max(1, episodes))
            info["trial_spl"] = float(vec.trial_spl[0] / max(1, episodes))
            info["trial_return"] = float(vec.trial_return[0])
            self._started = False
        return result.obs[0].copy(), float(result.reward[0]), False, truncated, info

    def _info(self) -> dict[str, Any]:
        vec = self.vec
        return {
            "inner_episode": int(vec.episode_index[0]),
            "inner_episode_step": int(vec.t_episode[0]),
            "target": int(vec.target[0]),
            "distance": int(vec.dist[0]),
        }

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        from memrl.envs.objnav.render import render_frame

        return render_frame(self.vec, 0, self.cell_px)
