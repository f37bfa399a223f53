"""Dark-Key-To-Door: the in-context RL memory task of the Memo paper (arXiv 2510.19732).

A trial (one RLlib episode) is ``trial_len`` steps in one layout: start, key and door cells drawn
uniformly and independently on a ``size`` x ``size`` grid. Inside the trial, inner episodes of at
most ``episode_len`` steps restart the agent at the start cell (soft reset: the layout stays). The
agent gets +1 on first reaching the key and +1 on reaching the door while holding the key, which
ends the inner episode. In the dark the observation does not show key or door, so an agent can only
get faster after its first inner episode by remembering where they were.

Observation (float32):
    ``[x/size, y/size, has_key, t/episode_len]`` (``t``: step within the inner episode), then, with
    ``dark=False``, ``[key_x/size, key_y/size, door_x/size, door_y/size]``, then, with
    ``in_context_inputs=True``, the previous action one-hot (5), the previous reward and a flag that
    is 1 at the first step of an inner episode.
Actions: 0 no-op, 1 up (y+1), 2 down (y-1), 3 left (x-1), 4 right (x+1); moves are clipped at walls.
Info: ``inner_episode`` (index within the trial), ``inner_episode_step``, and at the step that ends
an inner episode ``inner_episode_done=True``, ``inner_episode_return``, ``inner_episode_success``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from memrl.envs.vector_utils import check_actions, per_env_seeds

TRIAL_ENDS = ("truncate", "terminate")
"""How a trial's time limit reaches RLlib: ``truncate`` (the learner bootstraps the value of the
last state, as if the trial went on) or ``terminate`` (the return ends with the trial)."""

_MOVES = np.array([[0, 0], [0, 1], [0, -1], [-1, 0], [1, 0]], dtype=np.int64)
NUM_ACTIONS = len(_MOVES)


class DarkKeyToDoorEnv(gym.Env):
    """The Dark-Key-To-Door grid world; one env episode is one trial of many inner episodes."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        size: int = 9,
        episode_len: int = 50,
        trial_len: int = 500,
        dark: bool = True,
        in_context_inputs: bool = True,
        render_mode: str | None = None,
        trial_end: str = "truncate",
    ) -> None:
        if trial_end not in TRIAL_ENDS:
            raise ValueError(f"trial_end must be one of {list(TRIAL_ENDS)}, got {trial_end!r}")
        for name, value, low in (
            ("size", size, 2),
            ("episode_len", episode_len, 1),
            ("trial_len", trial_len, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"DarkKeyToDoor {name} must be an int >= {low}, got {value!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.size = size
        self.episode_len = episode_len
        self.trial_len = trial_len
        self.dark = bool(dark)
        self.in_context_inputs = bool(in_context_inputs)
        self.render_mode = render_mode
        self.trial_end = trial_end
        obs_dim = 4 + (0 if self.dark else 4) + (NUM_ACTIONS + 2 if self.in_context_inputs else 0)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(obs_dim,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self._start = np.zeros(2, np.int64)
        self._key = np.zeros(2, np.int64)
        self._door = np.zeros(2, np.int64)
        self._pos = np.zeros(2, np.int64)
        self._has_key = False
        self._t = 0
        self._trial_t = 0
        self._inner = 0
        self._inner_return = 0.0

    # The hidden layout, for tests and renderers.
    @property
    def agent_pos(self) -> tuple[int, int]:
        return int(self._pos[0]), int(self._pos[1])

    @property
    def key_pos(self) -> tuple[int, int]:
        return int(self._key[0]), int(self._key[1])

    @property
    def door_pos(self) -> tuple[int, int]:
        return int(self._door[0]), int(self._door[1])

    @property
    def start_pos(self) -> tuple[int, int]:
        return int(self._start[0]), int(self._start[1])

    @property
    def has_key(self) -> bool:
        return self._has_key

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts a new trial with a freshly drawn layout."""
        super().reset(seed=seed)
        cells = self.np_random.integers(0, self.size, size=(3, 2))
        self._start, self._key, self._door = cells[0], cells[1], cells[2]
        self._trial_t = 0
        self._inner = 0
        self._soft_reset()
        return self._obs(prev_action=None, prev_reward=0.0), self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = int(action)
        if not 0 <= action < NUM_ACTIONS:
            raise ValueError(f"action must be in [0, {NUM_ACTIONS}), got {action}")
        self._pos = np.clip(self._pos + _MOVES[action], 0, self.size - 1)
        self._t += 1
        self._trial_t += 1
        reward = 0.0
        success = False
        if not self._has_key and (self._pos == self._key).all():
            self._has_key = True
            reward += 1.0
        elif self._has_key and (self._pos == self._door).all():
            reward += 1.0
            success = True
        self._inner_return += reward
        trial_over = self._trial_t >= self.trial_len
        if success or self._t >= self.episode_len or trial_over:
            info = self._info()
            info.update(
                inner_episode_done=True,
                inner_episode_return=self._inner_return,
                inner_episode_success=success,
            )
            if not trial_over:
                self._inner += 1
                self._soft_reset()
            obs = self._obs(prev_action=action, prev_reward=reward)
            # A trial ends on time: truncated (its last state's value is bootstrapped) or, with
            # trial_end="terminate", terminated (nothing is worth anything after the trial).
            ends = self.trial_end == "terminate"
            return obs, reward, trial_over and ends, trial_over and not ends, info
        return self._obs(prev_action=action, prev_reward=reward), reward, False, False, self._info()

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        rows = []
        for y in range(self.size - 1, -1, -1):
            row = ""
            for x in range(self.size):
                cell = (x, y)
                row += (
                    "A"
                    if cell == self.agent_pos
                    else "K"
                    if cell == self.key_pos and not self._has_key
                    else "D"
                    if cell == self.door_pos
                    else "."
                )
            rows.append(row)
        return "\n".join(rows)

    def _soft_reset(self) -> None:
        self._pos = self._start.copy()
        self._has_key = False
        self._t = 0
        self._inner_return = 0.0

    def _obs(self, prev_action: int | None, prev_reward: float) -> np.ndarray:
        s = self.size
        parts = [
            self._pos[0] / s,
            self._pos[1] / s,
            float(self._has_key),
            self._t / self.episode_len,
        ]
        if not self.dark:
            parts += [self._key[0] / s, self._key[1] / s, self._door[0] / s, self._door[1] / s]
        obs = np.zeros(self.observation_space.shape, np.float32)
        obs[: len(parts)] = parts
        if self.in_context_inputs:
            base = len(parts)
            if prev_action is not None:
                obs[base + prev_action] = 1.0
            obs[base + NUM_ACTIONS] = prev_reward
            obs[base + NUM_ACTIONS + 1] = 1.0 if self._t == 0 else 0.0
        return obs

    def _info(self) -> dict[str, Any]:
        return {"inner_episode": self._inner, "inner_episode_step": self._t}


class DarkKeyToDoorVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` Dark-Key-To-Door envs stepped together with numpy: no Python loop over envs.

    The same dynamics, observations and rewards as ``num_envs`` copies of :class:`DarkKeyToDoorEnv`
    in gymnasium's ``SyncVectorEnv``, and the same trajectories for the same seeds (env ``i`` is
    seeded with ``seed + i`` and draws its layouts from its own generator, exactly as the single
    env does). Autoreset follows gymnasium's NEXT_STEP mode, which RLlib's env runner expects: the
    step after a trial ends resets that env and returns its first observation (reward 0; the
    action is ignored).

    Infos are gymnasium's vector dicts of arrays with ``_key`` masks. Unlike the single env, which
    reports ``inner_episode`` and ``inner_episode_step`` at every step, the vector env reports keys
    only for the envs whose inner episode ends at that step (``inner_episode``,
    ``inner_episode_step``, ``inner_episode_done``, ``inner_episode_return``,
    ``inner_episode_success``): per-step info is the main cost of vectorized stepping in RLlib.
    """

    metadata = {
        "render_modes": [],
        "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP,
    }

    def __init__(
        self,
        num_envs: int,
        size: int = 9,
        episode_len: int = 50,
        trial_len: int = 500,
        dark: bool = True,
        in_context_inputs: bool = True,
        trial_end: str = "truncate",
    ) -> None:
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        # The single env validates the arguments and defines the spaces.
        proto = DarkKeyToDoorEnv(
            size, episode_len, trial_len, dark, in_context_inputs, trial_end=trial_end
        )
        self.trial_end = trial_end
        self.num_envs = num_envs
        self.size, self.episode_len, self.trial_len = size, episode_len, trial_len
        self.dark, self.in_context_inputs = proto.dark, proto.in_context_inputs
        self.single_observation_space = proto.observation_space
        self.single_action_space = proto.action_space
        self.observation_space = gym.vector.utils.batch_space(proto.observation_space, num_envs)
        self.action_space = gym.spaces.MultiDiscrete(np.full(num_envs, NUM_ACTIONS))
        self._obs_dim = proto.observation_space.shape[0]
        self._base = 4 + (0 if self.dark else 4)
        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        n = num_envs
        self._start = np.zeros((n, 2), np.int64)
        self._key = np.zeros((n, 2), np.int64)
        self._door = np.zeros((n, 2), np.int64)
        self._pos = np.zeros((n, 2), np.int64)
        self._has_key = np.zeros(n, bool)
        self._t = np.zeros(n, np.int64)
        self._trial_t = np.zeros(n, np.int64)
        self._inner = np.zeros(n, np.int64)
        self._inner_return = np.zeros(n, np.float64)
        self._needs_reset = np.zeros(n, bool)
        self._started = False

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts a new trial in every env; ``seed`` is an int (env i gets seed + i) or a list."""
        from gymnasium.utils import seeding

        for i, s in enumerate(per_env_seeds(seed, self.num_envs)):
            if s is not None or self._rngs[i] is None:
                self._rngs[i] = seeding.np_random(s)[0]
        every = np.arange(self.num_envs)
        self._new_trials(every)
        self._needs_reset[:] = False
        self._started = True
        obs = self._observe(every, prev_action=None, prev_reward=np.zeros(self.num_envs))
        return obs, {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = check_actions(
            actions, self.num_envs, NUM_ACTIONS, self._started, "DarkKeyToDoorVectorEnv"
        )
        n = self.num_envs
        restart = self._needs_reset.copy()
        live = ~restart
        pos = np.clip(self._pos + _MOVES[actions], 0, self.size - 1)
        self._pos = np.where(live[:, None], pos, self._pos)
        self._t += live
        self._trial_t += live
        at_key = (self._pos == self._key).all(axis=1)
        at_door = (self._pos == self._door).all(axis=1)
        got_key = live & ~self._has_key & at_key
        success = live & self._has_key & at_door
        self._has_key |= got_key
        reward = (got_key | success).astype(np.float64)
        self._inner_return += reward
        trial_over = live & (self._trial_t >= self.trial_len)
        inner_done = live & (success | (self._t >= self.episode_len) | trial_over)

        infos: dict[str, Any] = {}
        if inner_done.any():
            mask = inner_done
            for key, value in (
                ("inner_episode", self._inner.copy()),
                ("inner_episode_step", self._t.copy()),
                ("inner_episode_done", inner_done.copy()),
                ("inner_episode_return", self._inner_return.copy()),
                ("inner_episode_success", success.copy()),
            ):
                infos[key] = value
                infos["_" + key] = mask
            soft = np.flatnonzero(inner_done & ~trial_over)
            self._inner[soft] += 1
            self._soft_reset(soft)
        prev_action = np.where(live, actions, -1)
        if restart.any():
            self._new_trials(np.flatnonzero(restart))
        self._needs_reset = trial_over
        obs = self._observe(np.arange(n), prev_action=prev_action, prev_reward=reward)
        # A trial ends on time: truncated or terminated, as in the single env.
        if self.trial_end == "terminate":
            return obs, reward, trial_over.copy(), np.zeros(n, bool), infos
        return obs, reward, np.zeros(n, bool), trial_over.copy(), infos

    def _new_trials(self, envs: np.ndarray) -> None:
        for i in envs:
            cells = self._rngs[i].integers(0, self.size, size=(3, 2))
            self._start[i], self._key[i], self._door[i] = cells[0], cells[1], cells[2]
        self._trial_t[envs] = 0
        self._inner[envs] = 0
        self._soft_reset(envs)

    def _soft_reset(self, envs: np.ndarray) -> None:
        self._pos[envs] = self._start[envs]
        self._has_key[envs] = False
        self._t[envs] = 0
        self._inner_return[envs] = 0.0

    def _observe(
        self, envs: np.ndarray, prev_action: np.ndarray | None, prev_reward: np.ndarray
    ) -> np.ndarray:
        """A fresh (num_envs, obs_dim) array: RLlib keeps each row, so buffers are not reused."""
        s = self.size
        obs = np.zeros((self.num_envs, self._obs_dim), np.float32)
        obs[:, 0:2] = self._pos / s
        obs[:, 2] = self._has_key
        obs[:, 3] = self._t / self.episode_len
        if not self.dark:
            obs[:, 4:6] = self._key / s
            obs[:, 6:8] = self._door / s
        if self.in_context_inputs:
            base = self._base
            if prev_action is not None:
                acted = np.flatnonzero(prev_action >= 0)
                obs[acted, base + prev_action[acted]] = 1.0
            obs[:, base + NUM_ACTIONS] = prev_reward
            obs[:, base + NUM_ACTIONS + 1] = self._t == 0
        return obs
