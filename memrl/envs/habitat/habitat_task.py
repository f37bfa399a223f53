"""ExtObjNavTask: habitat-lab's gym env with ExtObjNav's task, served by the worker (Python 3.9).

Runs inside the habitat environment only (stdlib + numpy + habitat): no gymnasium, no memrl.
It follows gymnasium's API (``reset -> (obs, info)``, ``step -> 5-tuple``) on top of habitat-lab's
gym env (``habitat.gym.make_gym_from_config``, old gym API), and adds what ExtObjNav needs
(the Memo paper's setting):

- a trial = ``trial_len`` steps in one scene; inner episodes are habitat episodes of that scene,
  started one after the other inside the trial (``truncated`` when the trial ends);
- actions 0 stop, 1 forward 0.25 m, 2 turn left 30 deg, 3 turn right 30 deg, 4 look up 30 deg,
  5 look down 30 deg (mapped to habitat's action names);
- observation ``{"rgb": (H, W, 3) uint8, "objectgoal": (K,) float32 one-hot, "gps": (4,) float32}``
  with gps = (metres ahead, metres right) of the trial's start pose, sin and cos of the heading
  relative to it (clockwise positive: turning right raises it, as in ObjNav-lite);
- success = STOP with the geodesic distance to the nearest target instance <= success_distance
  and, when the config has a semantic sensor, >= min_visible_pixels pixels of the goal objects;
  reward = +success_reward on success - step_cost + decrease in geodesic distance; SPL = success *
  d0 / max(d0, path length), all computed here from habitat's ``distance_to_goal`` measure.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

logger = logging.getLogger("memrl.envs.habitat.task")

ACTIONS = ("stop", "move_forward", "turn_left", "turn_right", "look_up", "look_down")


class Box:
    """The Box attributes ``wire.describe_space`` reads (the worker has no gymnasium)."""

    def __init__(self, low: float, high: float, shape: tuple[int, ...], dtype: Any):
        self.low, self.high, self.shape, self.dtype = low, high, shape, np.dtype(dtype)


class Discrete:
    def __init__(self, n: int):
        self.n = n


class Dict:
    def __init__(self, spaces: dict[str, Any]):
        self.spaces = spaces


def _yaw(rotation: Any) -> float:
    """Heading (radians, about +y) of a habitat agent rotation quaternion."""
    w, y = float(rotation.w), float(rotation.y)
    return 2.0 * math.atan2(y, w)


class ExtObjNavTask:
    """The ExtObjNav task on habitat-lab; the worker's ``habitat`` backend.

    Args:
        config_path: a habitat-lab benchmark config (HSSD object navigation by default).
        overrides: extra Hydra overrides, applied after the task's own.
        num_categories: size of the target one-hot (ExtObjNav: 20).
        episode_len: step limit of an inner episode.
        trial_len: steps of a trial in one scene.
        success_distance: metres to the nearest target instance for a successful STOP.
        min_visible_pixels: goal-object pixels needed in view (checked with a semantic sensor).
        success_reward, step_cost: reward terms.
        forward_step_m, turn_deg, tilt_deg: action sizes.
        rgb_size: (height, width) of the RGB sensor.
        gpu_device_id: GPU of the simulator.
        seed: seed of scene and episode choice.
        render_mode: ``"rgb_array"`` renders the RGB view with the metrics.
    """

    def __init__(
        self,
        config_path: str = "benchmark/nav/objectnav/objectnav_hssd-hab.yaml",
        overrides: list[str] | None = None,
        num_categories: int = 20,
        episode_len: int = 500,
        trial_len: int = 4096,
        success_distance: float = 2.0,
        min_visible_pixels: int = 10,
        success_reward: float = 2.0,
        step_cost: float = 0.003,
        forward_step_m: float = 0.25,
        turn_deg: float = 30.0,
        tilt_deg: float = 30.0,
        rgb_size: tuple[int, int] = (128, 128),
        gpu_device_id: int = 0,
        seed: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        import habitat
        from habitat.gym import make_gym_from_config

        height, width = int(rgb_size[0]), int(rgb_size[1])
        sensors = "habitat.simulator.agents.main_agent.sim_sensors"
        task_overrides = [
            f"habitat.environment.max_episode_steps={episode_len}",
            f"habitat.simulator.forward_step_size={forward_step_m}",
            f"habitat.simulator.turn_angle={int(turn_deg)}",
            f"habitat.simulator.tilt_angle={int(tilt_deg)}",
            f"habitat.simulator.habitat_sim_v0.gpu_device_id={gpu_device_id}",
            f"{sensors}.rgb_sensor.height={height}",
            f"{sensors}.rgb_sensor.width={width}",
            # ExtObjNav measures distance to the objects, not to habitat's viewpoints.
            "habitat.task.measurements.distance_to_goal.distance_to=POINT",
            f"habitat.task.measurements.success.success_distance={success_distance}",
        ]
        self.config = habitat.get_config(
            config_path, overrides=task_overrides + list(overrides or [])
        )
        self.gym = make_gym_from_config(self.config)
        rl_env = self.gym.unwrapped
        self.henv = getattr(rl_env, "habitat_env", None) or rl_env._env
        original = getattr(self.gym, "original_action_space", None)
        names = list(original.spaces.keys()) if original is not None else list(ACTIONS)
        missing = [a for a in ACTIONS if a not in names]
        if missing:
            raise ValueError(f"the habitat config lacks actions {missing}; it has {names}")
        self._action_index = [names.index(a) for a in ACTIONS]

        self.num_categories = num_categories
        self.episode_len = episode_len
        self.trial_len = trial_len
        self.success_distance = success_distance
        self.min_visible_pixels = min_visible_pixels
        self.success_reward = success_reward
        self.step_cost = step_cost
        self.render_mode = render_mode
        self.observation_space = Dict(
            {
                "rgb": Box(0, 255, (height, width, 3), np.uint8),
                "objectgoal": Box(0.0, 1.0, (num_categories,), np.float32),
                "gps": Box(-np.inf, np.inf, (4,), np.float32),
            }
        )
        self.action_space = Discrete(len(ACTIONS))

        self._rng = np.random.default_rng(seed)
        self._scenes: dict[str, list[Any]] = {}
        for episode in self.henv.episodes:
            self._scenes.setdefault(episode.scene_id, []).append(episode)
        if not self._scenes:
            raise ValueError(f"the habitat dataset of {config_path} has no episodes")
        self._scene = ""
        self._t_trial = 0
        self._warned_no_semantic = False
        logger.info(
            "ExtObjNav on %d scenes, %d episodes",
            len(self._scenes),
            sum(len(v) for v in self._scenes.values()),
        )

    # ---- trial and inner episodes --------------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        scenes = sorted(self._scenes)
        if options and options.get("scene"):
            if options["scene"] not in self._scenes:
                raise ValueError(f"unknown scene {options['scene']!r}; scenes: {scenes}")
            self._scene = options["scene"]
        else:
            self._scene = scenes[int(self._rng.integers(len(scenes)))]
        self._t_trial = 0
        self._episode_index = -1
        obs = self._start_episode(first=True)
        return obs, self._info()

    def _start_episode(self, first: bool = False) -> dict[str, np.ndarray]:
        episodes = self._scenes[self._scene]
        self.henv.current_episode = episodes[int(self._rng.integers(len(episodes)))]
        raw = self.gym.reset()
        state = self.henv.sim.get_agent_state()
        if first:
            self._origin = np.asarray(state.position, dtype=np.float64)
            self._origin_yaw = _yaw(state.rotation)
        self._episode_index += 1
        self._t_episode = 0
        self._last_position = np.asarray(state.position, dtype=np.float64)
        self._path_length = 0.0
        self._distance = float(self.henv.get_metrics()["distance_to_goal"])
        self._start_distance = self._distance
        self._episode_return = 0.0
        return self._observation(raw, state)

    def step(self, action: int):
        action = int(action)
        if not 0 <= action < len(ACTIONS):
            raise ValueError(f"ExtObjNav action must be in [0, {len(ACTIONS)}), got {action}")
        raw, _, done, metrics = self.gym.step(self._action_index[action])
        state = self.henv.sim.get_agent_state()
        position = np.asarray(state.position, dtype=np.float64)
        self._path_length += float(np.linalg.norm(position - self._last_position))
        self._last_position = position
        distance = float(metrics["distance_to_goal"])
        success = action == 0 and distance <= self.success_distance and self._goal_in_view(raw)
        reward = self.success_reward * success - self.step_cost + (self._distance - distance)
        self._distance = distance
        self._episode_return += reward
        self._t_episode += 1
        self._t_trial += 1
        info = self._info()
        truncated = self._t_trial >= self.trial_len
        if action == 0 or done or self._t_episode >= self.episode_len:
            spl = (
                self._start_distance / max(self._start_distance, self._path_length)
                if success
                else 0.0
            )
            info.update(
                inner_episode_done=True,
                inner_episode_success=bool(success),
                inner_episode_spl=float(spl),
                inner_episode_length=self._t_episode,
                inner_episode_return=float(self._episode_return),
            )
            if not truncated:
                return self._start_episode(), float(reward), False, False, info
        return self._observation(raw, state), float(reward), False, truncated, info

    # ---- observation and metrics ---------------------------------------------------------------

    def _goal_in_view(self, raw: dict[str, Any]) -> bool:
        if self.min_visible_pixels <= 0:
            return True
        semantic = raw.get("semantic")
        if semantic is None:
            if not self._warned_no_semantic:
                logger.warning("no semantic sensor in the config: success ignores visibility")
                self._warned_no_semantic = True
            return True
        ids = [
            int(g.object_id)
            for g in self.henv.current_episode.goals
            if getattr(g, "object_id", None) is not None
        ]
        return int(np.isin(semantic, ids).sum()) >= self.min_visible_pixels

    def _observation(self, raw: dict[str, Any], state: Any) -> dict[str, np.ndarray]:
        goal = int(np.asarray(raw["objectgoal"]).ravel()[0])
        if not 0 <= goal < self.num_categories:
            raise ValueError(
                f"habitat target category {goal} does not fit num_categories="
                f"{self.num_categories}; raise num_categories"
            )
        onehot = np.zeros(self.num_categories, dtype=np.float32)
        onehot[goal] = 1.0
        delta = np.asarray(state.position, dtype=np.float64) - self._origin
        yaw0 = self._origin_yaw
        ahead = -delta[0] * math.sin(yaw0) - delta[2] * math.cos(yaw0)
        right = delta[0] * math.cos(yaw0) - delta[2] * math.sin(yaw0)
        rel = yaw0 - _yaw(state.rotation)  # positive to the right, as in ObjNav-lite
        gps = np.array([ahead, right, math.sin(rel), math.cos(rel)], dtype=np.float32)
        rgb = np.asarray(raw["rgb"])[..., :3].astype(np.uint8)
        return {"rgb": rgb, "objectgoal": onehot, "gps": gps}

    def _info(self) -> dict[str, Any]:
        return {
            "inner_episode": self._episode_index,
            "inner_episode_step": self._t_episode,
            "scene": self._scene,
            "distance": self._distance,
        }

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        return self.gym.render(mode="rgb_array")

    def close(self) -> None:
        self.gym.close()
