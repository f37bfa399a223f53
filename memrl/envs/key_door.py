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

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from memrl.envs.vector_utils import NextStepVectorEnv, ending_infos

TRIAL_ENDS = ("truncate", "terminate")
"""How a trial's time limit reaches RLlib: ``truncate`` (the learner bootstraps the value of the
last state, as if the trial went on) or ``terminate`` (the return ends with the trial)."""

MOVES = np.array([[0, 0], [0, 1], [0, -1], [-1, 0], [1, 0]], dtype=np.int64)
"""(dx, dy) of each action: no-op, up, down, left, right."""
NUM_ACTIONS = len(MOVES)


def moved(pos: tuple[int, int], action: int, size: int) -> tuple[int, int]:
    """The cell that ``action`` leads to from ``pos`` on a ``size`` x ``size`` grid (moves are
    clipped at the walls)."""
    dx, dy = (int(d) for d in MOVES[action])
    return min(max(pos[0] + dx, 0), size - 1), min(max(pos[1] + dy, 0), size - 1)


class KeyDoorCore:
    """The state and rules of ``n`` Dark-Key-To-Door trials, stepped together with numpy.

    Both envs are built on it: ``DarkKeyToDoorEnv`` is one trial (n = 1), and
    ``DarkKeyToDoorVectorEnv`` n of them with gymnasium's autoreset; the rules live only here.
    Arrays are indexed by env: ``pos``, ``start``, ``key``, ``door`` (n, 2) cells; ``has_key`` (n,);
    ``t`` (n,) steps into the inner episode; ``trial_t`` (n,) into the trial; ``inner`` (n,) the
    inner episode's index; ``inner_return`` (n,).
    """

    def __init__(
        self,
        n: int,
        size: int,
        episode_len: int,
        trial_len: int,
        dark: bool,
        in_context_inputs: bool,
        trial_end: str,
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
        self.n, self.size, self.episode_len, self.trial_len = n, size, episode_len, trial_len
        self.dark, self.in_context_inputs = bool(dark), bool(in_context_inputs)
        self.trial_end = trial_end
        self.base = 4 + (0 if self.dark else 4)
        """Where the in-context inputs start in an observation."""
        self.obs_dim = self.base + (NUM_ACTIONS + 2 if self.in_context_inputs else 0)
        self.start = np.zeros((n, 2), np.int64)
        self.key = np.zeros((n, 2), np.int64)
        self.door = np.zeros((n, 2), np.int64)
        self.pos = np.zeros((n, 2), np.int64)
        self.has_key = np.zeros(n, bool)
        self.t = np.zeros(n, np.int64)
        self.trial_t = np.zeros(n, np.int64)
        self.inner = np.zeros(n, np.int64)
        self.inner_return = np.zeros(n, np.float64)

    def observation_space(self) -> gym.spaces.Box:
        """The space of one env's observation."""
        return gym.spaces.Box(-1.0, 1.0, shape=(self.obs_dim,), dtype=np.float32)

    def new_trials(self, envs: np.ndarray, rngs: Sequence[np.random.Generator]) -> None:
        """Draws a fresh layout for each env in ``envs`` from its own generator ``rngs[i]``."""
        for i in envs:
            cells = rngs[i].integers(0, self.size, size=(3, 2))
            self.start[i], self.key[i], self.door[i] = cells[0], cells[1], cells[2]
        self.trial_t[envs] = 0
        self.inner[envs] = 0
        self.soft_reset(envs)

    def soft_reset(self, envs: np.ndarray) -> None:
        """Starts a new inner episode: back at the start cell, without the key; layout kept."""
        self.pos[envs] = self.start[envs]
        self.has_key[envs] = False
        self.t[envs] = 0
        self.inner_return[envs] = 0.0

    def move(
        self, actions: np.ndarray, live: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One step of the envs in ``live`` (bool (n,)); the others stand still.

        Returns:
            (reward, success, trial_over, inner_done), each (n,): +1 on first reaching the key
            and on reaching the door with it (success); the trial's time is up; the inner
            episode ends (success, its time is up, or the trial's).
        """
        pos = np.clip(self.pos + MOVES[actions], 0, self.size - 1)
        self.pos = np.where(live[:, None], pos, self.pos)
        self.t += live
        self.trial_t += live
        at_key = (self.pos == self.key).all(axis=1)
        at_door = (self.pos == self.door).all(axis=1)
        got_key = live & ~self.has_key & at_key
        success = live & self.has_key & at_door
        self.has_key |= got_key
        reward = (got_key | success).astype(np.float64)
        self.inner_return += reward
        trial_over = live & (self.trial_t >= self.trial_len)
        inner_done = live & (success | (self.t >= self.episode_len) | trial_over)
        return reward, success, trial_over, inner_done

    def inner_episode_info(self, success: np.ndarray) -> dict[str, np.ndarray]:
        """What an ending inner episode reports (read before ``next_inner_episodes``)."""
        return {
            "inner_episode": self.inner.copy(),
            "inner_episode_step": self.t.copy(),
            "inner_episode_return": self.inner_return.copy(),
            "inner_episode_success": success.copy(),
        }

    def next_inner_episodes(self, inner_done: np.ndarray, trial_over: np.ndarray) -> None:
        """Soft-resets the envs whose inner episode ended within a trial that goes on."""
        soft = np.flatnonzero(inner_done & ~trial_over)
        self.inner[soft] += 1
        self.soft_reset(soft)

    def ends(self, trial_over: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(terminated, truncated) of a trial that ended on time: truncated (its last state's
        value is bootstrapped) or, with trial_end="terminate", terminated."""
        never = np.zeros_like(trial_over)
        if self.trial_end == "terminate":
            return trial_over.copy(), never
        return never, trial_over.copy()

    def observe(self, prev_action: np.ndarray | None, prev_reward: np.ndarray) -> np.ndarray:
        """A fresh (n, obs_dim) float32 array (RLlib keeps each row, so buffers are not reused).

        Args:
            prev_action: (n,) the action of the step that led here, -1 for none; None: none.
            prev_reward: (n,) its reward.
        """
        s = self.size
        obs = np.zeros((self.n, self.obs_dim), np.float32)
        obs[:, 0:2] = self.pos / s
        obs[:, 2] = self.has_key
        obs[:, 3] = self.t / self.episode_len
        if not self.dark:
            obs[:, 4:6] = self.key / s
            obs[:, 6:8] = self.door / s
        if self.in_context_inputs:
            base = self.base
            if prev_action is not None:
                acted = np.flatnonzero(prev_action >= 0)
                obs[acted, base + prev_action[acted]] = 1.0
            obs[:, base + NUM_ACTIONS] = prev_reward
            obs[:, base + NUM_ACTIONS + 1] = self.t == 0
        return obs


class DarkKeyToDoorEnv(gym.Env):
    """The Dark-Key-To-Door grid world; one env episode is one trial of many inner episodes
    (``KeyDoorCore`` with one env)."""

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
        self.core = KeyDoorCore(1, size, episode_len, trial_len, dark, in_context_inputs, trial_end)
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.size, self.episode_len, self.trial_len = size, episode_len, trial_len
        self.dark, self.in_context_inputs = self.core.dark, self.core.in_context_inputs
        self.render_mode = render_mode
        self.trial_end = trial_end
        self.observation_space = self.core.observation_space()
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)

    # The hidden layout, for tests and renderers.
    @property
    def agent_pos(self) -> tuple[int, int]:
        return int(self.core.pos[0, 0]), int(self.core.pos[0, 1])

    @property
    def key_pos(self) -> tuple[int, int]:
        return int(self.core.key[0, 0]), int(self.core.key[0, 1])

    @property
    def door_pos(self) -> tuple[int, int]:
        return int(self.core.door[0, 0]), int(self.core.door[0, 1])

    @property
    def start_pos(self) -> tuple[int, int]:
        return int(self.core.start[0, 0]), int(self.core.start[0, 1])

    @property
    def has_key(self) -> bool:
        return bool(self.core.has_key[0])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts a new trial with a freshly drawn layout."""
        super().reset(seed=seed)
        self.core.new_trials(np.zeros(1, np.int64), [self.np_random])
        return self.core.observe(None, np.zeros(1))[0], self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = int(action)
        if not 0 <= action < NUM_ACTIONS:
            raise ValueError(f"action must be in [0, {NUM_ACTIONS}), got {action}")
        actions = np.full(1, action, np.int64)
        core = self.core
        reward, success, trial_over, inner_done = core.move(actions, np.ones(1, bool))
        info = self._info()
        if inner_done[0]:
            ending = core.inner_episode_info(success)
            info = {
                "inner_episode": int(ending["inner_episode"][0]),
                "inner_episode_step": int(ending["inner_episode_step"][0]),
                "inner_episode_done": True,
                "inner_episode_return": float(ending["inner_episode_return"][0]),
                "inner_episode_success": bool(success[0]),
            }
            core.next_inner_episodes(inner_done, trial_over)
        obs = core.observe(actions, reward)[0]
        terminated, truncated = core.ends(trial_over)
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

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
                    if cell == self.key_pos and not self.has_key
                    else "D"
                    if cell == self.door_pos
                    else "."
                )
            rows.append(row)
        return "\n".join(rows)

    def _info(self) -> dict[str, Any]:
        return {"inner_episode": int(self.core.inner[0]), "inner_episode_step": int(self.core.t[0])}


class DarkKeyToDoorVectorEnv(NextStepVectorEnv):
    """``num_envs`` Dark-Key-To-Door envs stepped together with numpy (``KeyDoorCore``): no
    Python loop over envs.

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
        self.core = KeyDoorCore(
            num_envs, size, episode_len, trial_len, dark, in_context_inputs, trial_end
        )
        self._setup(num_envs, self.core.observation_space(), NUM_ACTIONS)
        self.trial_end = trial_end
        self.size, self.episode_len, self.trial_len = size, episode_len, trial_len
        self.dark, self.in_context_inputs = self.core.dark, self.core.in_context_inputs

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts a new trial in every env; ``seed`` is an int (env i gets seed + i) or a list."""
        self._seed(seed)
        self.core.new_trials(np.arange(self.num_envs), self._rngs)
        return self.core.observe(None, np.zeros(self.num_envs)), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions, restart, live = self._begin_step(actions)
        core = self.core
        reward, success, trial_over, inner_done = core.move(actions, live)
        infos: dict[str, Any] = {}
        if inner_done.any():
            ending = {**core.inner_episode_info(success), "inner_episode_done": inner_done.copy()}
            infos = ending_infos(ending, inner_done)
            core.next_inner_episodes(inner_done, trial_over)
        prev_action = np.where(live, actions, -1)
        if restart.any():
            core.new_trials(np.flatnonzero(restart), self._rngs)
        self._needs_reset = trial_over
        obs = core.observe(prev_action, reward)
        terminated, truncated = core.ends(trial_over)
        return obs, reward, terminated, truncated, infos
