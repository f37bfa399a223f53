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

import functools
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


def cell_of(pos: tuple[int, int], size: int) -> int:
    """The number of cell ``pos`` = (x, y) on a ``size`` x ``size`` grid: ``x + size * y`` (also
    elementwise, for arrays of x and y)."""
    return pos[0] + size * pos[1]


def pos_of(cell: int, size: int) -> tuple[int, int]:
    """The (x, y) of a cell number (``cell_of``'s inverse; also elementwise, for an array)."""
    return cell % size, cell // size


@functools.cache
def move_table(size: int) -> tuple[int, ...]:
    """The movement rule: entry ``action * size**2 + cell`` is the cell that ``action`` leads to
    from ``cell`` (moves are clipped at the walls)."""
    cells = np.arange(size * size)
    x, y = pos_of(cells, size)
    to_x = np.clip(x + MOVES[:, :1], 0, size - 1)  # (NUM_ACTIONS, size**2)
    to_y = np.clip(y + MOVES[:, 1:], 0, size - 1)
    return tuple(cell_of((to_x, to_y), size).ravel().tolist())


def moved(pos: tuple[int, int], action: int, size: int) -> tuple[int, int]:
    """The cell that ``action`` leads to from ``pos`` on a ``size`` x ``size`` grid (moves are
    clipped at the walls)."""
    return pos_of(move_table(size)[action * size * size + cell_of(pos, size)], size)


def draw_layout(rng: np.random.Generator, size: int) -> tuple[int, int, int]:
    """The start, key and door cells of a new trial, drawn uniformly and independently."""
    xys = rng.integers(0, size, size=(3, 2)).tolist()
    start, key, door = (cell_of(xy, size) for xy in xys)
    return start, key, door


def where(mask: Any, a: Any, b: Any) -> Any:
    """``a`` where ``mask`` holds, else ``b``: numpy's where for a bool array ``mask``, a
    conditional for a bool."""
    if isinstance(mask, np.ndarray):
        return np.where(mask, a, b)
    return a if mask else b


class KeyDoorCore:
    """The state and rules of Dark-Key-To-Door trials: one trial in plain Python scalars
    (``n=None``: ``DarkKeyToDoorEnv``) or ``n`` trials in (n,) numpy arrays
    (``DarkKeyToDoorVectorEnv``).

    Each rule is one line that both envs run: it uses only what means the same on Python ints
    and bools as on numpy arrays elementwise (arithmetic, comparisons, ``&``, ``|``, ``^ True``
    for not, lookups in tables built once per grid, ``where``), so the single env steps without
    numpy's per-call cost and the vector env without a Python loop over envs. Only where the
    state lives differs (allocation, writing a new layout, ``where``, packing the observation);
    tests/envs/test_key_door_vector.py holds the two envs to the same trajectories.

    State, per trial (an int, bool or float; or an (n,) array of them): cells ``pos``, ``start``,
    ``key``, ``door`` (numbered by ``cell_of``); ``has_key``; ``t`` steps into the inner episode;
    ``trial_t`` into the trial; ``inner`` the inner episode's index; ``inner_return``. A step
    replaces these arrays instead of writing into them, so an array handed out in an info keeps
    its values (only a new layout is written in place, into ``start``, ``key`` and ``door``).
    """

    def __init__(
        self,
        n: int | None,
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
        self.cells = size * size
        table = move_table(size)
        xys = [pos_of(cell, size) for cell in range(self.cells)]
        x_obs, y_obs = (tuple(v / size for v in vs) for vs in zip(*xys, strict=True))
        if n is None:
            self.next_cell, self.x_obs, self.y_obs = table, x_obs, y_obs
            self.start = self.key = self.door = self.pos = 0
            self.has_key = False
            self.t = self.trial_t = self.inner = 0
            self.inner_return = 0.0
        else:
            self.next_cell = np.array(table, np.int64)
            self.x_obs, self.y_obs = np.array(x_obs), np.array(y_obs)
            self.start = np.zeros(n, np.int64)
            self.key = np.zeros(n, np.int64)
            self.door = np.zeros(n, np.int64)
            self.pos = np.zeros(n, np.int64)
            self.has_key = np.zeros(n, bool)
            self.t = np.zeros(n, np.int64)
            self.trial_t = np.zeros(n, np.int64)
            self.inner = np.zeros(n, np.int64)
            self.inner_return = np.zeros(n, np.float64)

    def observation_space(self) -> gym.spaces.Box:
        """The space of one env's observation."""
        return gym.spaces.Box(-1.0, 1.0, shape=(self.obs_dim,), dtype=np.float32)

    def new_trials(self, envs: Any, rngs: Sequence[np.random.Generator]) -> None:
        """Draws a fresh layout for the trials in ``envs`` (True for the one trial, or an (n,)
        bool mask), trial i from its own generator ``rngs[i]``."""
        if self.n is None:
            self.start, self.key, self.door = draw_layout(rngs[0], self.size)
        else:
            for i in np.flatnonzero(envs):
                self.start[i], self.key[i], self.door[i] = draw_layout(rngs[i], self.size)
        self.trial_t = where(envs, 0, self.trial_t)
        self.inner = where(envs, 0, self.inner)
        self.soft_reset(envs)

    def soft_reset(self, envs: Any) -> None:
        """Starts a new inner episode in ``envs`` (a bool or an (n,) bool mask): back at the
        start cell, without the key; layout kept."""
        self.pos = where(envs, self.start, self.pos)
        self.has_key = where(envs, False, self.has_key)
        self.t = where(envs, 0, self.t)
        self.inner_return = where(envs, 0.0, self.inner_return)

    def move(self, actions: Any, live: Any) -> tuple[Any, Any, Any, Any]:
        """One step of the trials where ``live`` holds; the others stand still and get nothing.

        Args:
            actions: the action, or (n,) int64 actions.
            live: True, or an (n,) bool mask.

        Returns:
            (reward, success, trial_over, inner_done), each a scalar or (n,): +1 on first
            reaching the key and on reaching the door with it (success); the trial's time is up;
            the inner episode ends (success, its time is up, or the trial's).
        """
        self.pos = self.next_cell[actions * live * self.cells + self.pos]  # a standing env no-ops
        self.t = self.t + live
        self.trial_t = self.trial_t + live
        success = live & self.has_key & (self.pos == self.door)
        got_key = live & (self.has_key ^ True) & (self.pos == self.key)
        self.has_key = self.has_key | got_key
        reward = (got_key | success) * 1.0
        self.inner_return = self.inner_return + reward
        trial_over = live & (self.trial_t >= self.trial_len)
        inner_done = live & (success | (self.t >= self.episode_len) | trial_over)
        return reward, success, trial_over, inner_done

    def inner_episode_info(self, success: Any, inner_done: Any) -> dict[str, Any]:
        """What an ending inner episode reports (read before ``next_inner_episodes``)."""
        return {
            "inner_episode": self.inner,
            "inner_episode_step": self.t,
            "inner_episode_done": inner_done,
            "inner_episode_return": self.inner_return,
            "inner_episode_success": success,
        }

    def next_inner_episodes(self, inner_done: Any, trial_over: Any) -> None:
        """Soft-resets the trials whose inner episode ended within a trial that goes on."""
        soft = inner_done & (trial_over ^ True)
        self.inner = self.inner + soft
        self.soft_reset(soft)

    def ends(self, trial_over: Any) -> tuple[Any, Any]:
        """(terminated, truncated) of a trial that ended on time: truncated (its last state's
        value is bootstrapped) or, with trial_end="terminate", terminated."""
        never = trial_over & False
        if self.trial_end == "terminate":
            return trial_over, never
        return never, trial_over

    def observe(self, prev_action: Any, prev_reward: Any) -> np.ndarray:
        """A fresh float32 observation: (obs_dim,) for the one trial, (n, obs_dim) for n (RLlib
        keeps each row, so buffers are not reused).

        Args:
            prev_action: the action of the step that led here (an (n,) array: -1 for none);
                None: none.
            prev_reward: its reward (scalar or (n,)).
        """
        pos = self.pos
        cols = [self.x_obs[pos], self.y_obs[pos], self.has_key, self.t / self.episode_len]
        if not self.dark:
            key, door = self.key, self.door
            cols += [self.x_obs[key], self.y_obs[key], self.x_obs[door], self.y_obs[door]]
        if self.in_context_inputs:
            cols += [prev_action == a for a in range(NUM_ACTIONS)]
            cols += [prev_reward, self.t == 0]
        if self.n is None:
            return np.array(cols, np.float32)
        obs = np.empty((self.n, self.obs_dim), np.float32)
        for j, col in enumerate(cols):
            obs[:, j] = col
        return obs


class DarkKeyToDoorEnv(gym.Env):
    """The Dark-Key-To-Door grid world; one env episode is one trial of many inner episodes
    (``KeyDoorCore`` on plain Python scalars)."""

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
        self.core = KeyDoorCore(
            None, size, episode_len, trial_len, dark, in_context_inputs, trial_end
        )
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
        return pos_of(self.core.pos, self.size)

    @property
    def key_pos(self) -> tuple[int, int]:
        return pos_of(self.core.key, self.size)

    @property
    def door_pos(self) -> tuple[int, int]:
        return pos_of(self.core.door, self.size)

    @property
    def start_pos(self) -> tuple[int, int]:
        return pos_of(self.core.start, self.size)

    @property
    def has_key(self) -> bool:
        return self.core.has_key

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts a new trial with a freshly drawn layout."""
        super().reset(seed=seed)
        self.core.new_trials(True, [self.np_random])
        return self.core.observe(None, 0.0), self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = int(action)
        if not 0 <= action < NUM_ACTIONS:
            raise ValueError(f"action must be in [0, {NUM_ACTIONS}), got {action}")
        core = self.core
        reward, success, trial_over, inner_done = core.move(action, True)
        if inner_done:
            info = core.inner_episode_info(success, True)
            core.next_inner_episodes(True, trial_over)
        else:
            info = self._info()
        obs = core.observe(action, reward)
        terminated, truncated = core.ends(trial_over)
        return obs, reward, terminated, truncated, info

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
        return {"inner_episode": self.core.inner, "inner_episode_step": self.core.t}


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
        self.core.new_trials(np.ones(self.num_envs, bool), self._rngs)
        return self.core.observe(None, 0.0), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions, restart, live = self._begin_step(actions)
        core = self.core
        reward, success, trial_over, inner_done = core.move(actions, live)
        infos: dict[str, Any] = {}
        if inner_done.any():
            infos = ending_infos(core.inner_episode_info(success, inner_done), inner_done)
            core.next_inner_episodes(inner_done, trial_over)
        prev_action = np.where(live, actions, -1)
        if restart.any():
            core.new_trials(restart, self._rngs)
        self._needs_reset = trial_over
        obs = core.observe(prev_action, reward)
        # A copy: what the caller does with its arrays must not change which envs reset next.
        terminated, truncated = core.ends(trial_over.copy())
        return obs, reward, terminated, truncated, infos
