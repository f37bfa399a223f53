"""Replays of evaluation trials on grid and navigation envs, for the run report.

``ReplayRecorder`` wraps the vector env of the evaluation's env runner. After every reset and step
it reads each env's hidden state (Dark-Key-To-Door: agent, key, door, start, whether the agent
holds the key; ObjNav-lite: agent cell and heading, target, the cells in view, the map) and keeps
one record per finished trial: the states, actions, rewards and observations, step by step.
``replays_for`` then picks, for each evaluated episode, the trial whose observations, actions and
rewards are exactly the episode's, so a replay is the evaluated trajectory itself and not a
re-run. The result is compact JSON (positions per step, no images); the report draws the frames in
the browser.

The recorder reads the public state of single envs, so evaluation with replays steps the envs one
by one (gymnasium's sync vectorization): the same trajectories as the native vector env, which
memrl's vector envs guarantee for the same seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

REPLAY_ENVS = ("memrl/DarkKeyToDoor-v0", "memrl/ObjNav-v0")
"""Env ids the recorder knows how to read."""


def _key_door_layout(env: Any) -> dict[str, Any]:
    return {
        "kind": "key_door",
        "size": int(env.size),
        "episode_len": int(env.episode_len),
        "start": list(env.start_pos),
        "key": list(env.key_pos),
        "door": list(env.door_pos),
    }


def _key_door_state(env: Any) -> list[int]:
    x, y = env.agent_pos
    return [x, y, int(env.has_key)]


def _key_door_arrival(env: Any, before: list[int], action: int) -> list[int]:
    """Where the agent arrived at the step that ended an inner episode (the env has already put
    it back at the start cell, so its state shows the start)."""
    from memrl.envs.key_door import moved

    x, y = moved((before[0], before[1]), action, env.size)
    has_key = bool(before[2]) or [x, y] == list(env.key_pos)
    return [x, y, int(has_key)]


def _objnav_layout(env: Any) -> dict[str, Any]:
    from memrl.envs.objnav.render import category_colors

    vec = env.vec
    layout = vec.layouts[0]
    size, pad = vec.cfg.grid_size, layout.pad
    grid = layout.grid[pad : pad + size, pad : pad + size].astype(int)
    colors = category_colors(vec.cfg.num_categories)
    return {
        "kind": "objnav",
        "size": int(size),
        "grid": grid.tolist(),
        "colors": ["#" + "".join(f"{int(c):02x}" for c in rgb) for rgb in colors],
    }


def _objnav_state(env: Any) -> list[Any]:
    vec = env.vec
    y, x = (int(v) for v in vec.positions()[0])
    # Cells in view, as (row, column) of the map without its padding.
    cells = vec.pos[0] + vec.geom.offsets[vec.heading[0]][vec.visible[0]]
    rows, cols = np.divmod(cells, vec.stride)
    r = vec.cfg.view_radius
    seen = [[int(a - r), int(b - r)] for a, b in zip(rows, cols, strict=True)]
    return [y, x, int(vec.heading[0]), int(vec.target[0]), seen]


_READERS: dict[str, tuple[Callable[[Any], dict[str, Any]], Callable[[Any], list[Any]]]] = {
    "memrl/DarkKeyToDoor-v0": (_key_door_layout, _key_door_state),
    "memrl/ObjNav-v0": (_objnav_layout, _objnav_state),
}


class _Trial:
    """One trial as it happens in env ``i``: the layout, then a state per step."""

    def __init__(self, layout: dict[str, Any], state: list[Any], obs: np.ndarray) -> None:
        self.layout = layout
        self.states = [state]
        self.actions: list[int] = []
        self.rewards: list[float] = []
        self.inner: list[int] = [0]
        self.obs = [np.array(obs, copy=True)]
        self.env_state = state
        """The env's own state now (a shown state may differ: see _key_door_arrival)."""

    def add(self, state: list[Any], action: int, reward: float, obs: np.ndarray, inner: int):
        self.states.append(state)
        self.actions.append(int(action))
        self.rewards.append(float(reward))
        self.inner.append(inner)
        self.obs.append(np.array(obs, copy=True))


class ReplayRecorder(gym.vector.VectorWrapper):
    """Records every trial of a sync vector env of Dark-Key-To-Door or ObjNav-lite envs.

    Args:
        env: the env runner's vector env (its ``unwrapped`` is a ``SyncVectorEnv``).
        env_id: the envs' gymnasium id (one of ``REPLAY_ENVS``).
        keep: finished trials kept (the oldest beyond that are dropped).
    """

    def __init__(self, env: gym.vector.VectorEnv, env_id: str, keep: int = 256) -> None:
        super().__init__(env)
        if env_id not in _READERS:
            raise ValueError(f"No replay recorder for {env_id!r}; replays exist for {REPLAY_ENVS}")
        subs = getattr(env.unwrapped, "envs", None)
        if subs is None:
            raise ValueError(
                "ReplayRecorder needs gymnasium's sync vectorization (single envs it can read); "
                f"got {type(env.unwrapped).__name__}"
            )
        self._subs = [e.unwrapped for e in subs]
        self._layout, self._state = _READERS[env_id]
        self._keep = keep
        self._live: list[_Trial | None] = [None] * len(self._subs)
        self._ends = np.zeros(len(self._subs), bool)
        self._inner = np.zeros(len(self._subs), np.int64)
        self.finished: list[_Trial] = []

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[Any, Any]:
        obs, infos = self.env.reset(seed=seed, options=options)
        for i, sub in enumerate(self._subs):
            self._live[i] = _Trial(self._layout(sub), self._state(sub), obs[i])
        self._ends[:] = False
        self._inner[:] = 0
        return obs, infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, Any]:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        for i, sub in enumerate(self._subs):
            if self._ends[i]:  # NEXT_STEP autoreset: this step started a new trial
                self._live[i] = _Trial(self._layout(sub), self._state(sub), obs[i])
                self._inner[i] = 0
                continue
            trial = self._live[i]
            if trial is None:
                continue
            info = infos[i] if isinstance(infos, list | tuple) else {}
            ended = bool(info and info.get("inner_episode_done"))
            state = self._state(sub)
            shown = state
            if ended and self._layout is _key_door_layout:
                shown = _key_door_arrival(sub, trial.env_state, int(actions[i]))
            trial.env_state = state
            trial.add(shown, int(actions[i]), float(rewards[i]), obs[i], self._inner[i])
            if ended:
                self._inner[i] += 1
            if terminated[i] or truncated[i]:
                self.finished.append(trial)
                self._live[i] = None
                del self.finished[: -self._keep]
        self._ends = np.logical_or(terminated, truncated)
        return obs, rewards, terminated, truncated, infos


def replays_for(recorder: ReplayRecorder, episodes: list[Any], limit: int) -> list[dict[str, Any]]:
    """Replays of the first ``limit`` episodes that a recorded trial matches exactly.

    A trial matches an episode when its observations, actions and rewards are equal to the
    episode's, step by step.
    """
    out: list[dict[str, Any]] = []
    used: set[int] = set()
    for index, ep in enumerate(episodes):
        if len(out) >= limit:
            break
        obs = np.asarray(ep.get_observations())
        actions = np.asarray(ep.get_actions()).reshape(-1)
        rewards = np.asarray(ep.get_rewards(), dtype=np.float64)
        for k, trial in enumerate(recorder.finished):
            if k in used or len(trial.actions) != len(actions):
                continue
            if (
                np.array_equal(np.asarray(trial.actions), actions)
                and np.allclose(np.asarray(trial.rewards), rewards)
                and np.array_equal(np.stack(trial.obs), obs)
            ):
                used.add(k)
                out.append(trial_json(trial, episode_index=index))
                break
    return out


def trial_json(trial: _Trial, episode_index: int) -> dict[str, Any]:
    """A trial as JSON: the layout, and per step the state, the action taken to reach it, the
    reward and the inner-episode index (step 0 is the start: action -1)."""
    steps = []
    for t, state in enumerate(trial.states):
        action = trial.actions[t - 1] if t else -1
        reward = trial.rewards[t - 1] if t else 0.0
        steps.append([*state, action, reward, int(trial.inner[t])])
    inner_returns: dict[int, float] = {}
    for t, reward in enumerate(trial.rewards):
        inner_returns[trial.inner[t + 1]] = inner_returns.get(trial.inner[t + 1], 0.0) + reward
    return {
        **trial.layout,
        "episode": episode_index,
        "return": float(sum(trial.rewards)),
        "inner_returns": [inner_returns[k] for k in sorted(inner_returns)],
        "steps": steps,
    }
