"""Scripted reference agents for Dark-Key-To-Door: what memory is worth on a layout.

They act on what the agent itself can see (its position, the rewards it gets, the inner-episode
restarts) and never read the hidden layout, except ``informed``, which is told where key and door
are (the ceiling). The sweeps walk, at every step, to the nearest cell not yet ruled out for what
they look for: the key while not holding it (a cell visited without the key reward is ruled out),
then the door (a cell visited with the key and no door reward is ruled out). A found key or door
is walked to directly.

- ``sweep_memory``: keeps what it ruled out and found for the whole trial (in-context memory);
- ``sweep_forget``: forgets it at every inner-episode restart (no memory across inner episodes):
  the memoryless reference;
- ``informed``: walks shortest paths to key and door from the first step.

Ties between equally near cells are broken by the agent's own seeded generator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memrl.envs.key_door import MOVES, moved

AGENTS = ("sweep_memory", "sweep_forget", "informed")
_ACTION_OF = {(int(dx), int(dy)): action for action, (dx, dy) in enumerate(MOVES)}


class KeyDoorAgent:
    """One scripted agent for one env (``kind`` in AGENTS); ``reset`` at every trial start."""

    def __init__(self, kind: str, size: int, seed: int = 0) -> None:
        if kind not in AGENTS:
            raise ValueError(f"Unknown key-door agent {kind!r}. Available: {list(AGENTS)}")
        self.kind = kind
        self.size = size
        self.rng = np.random.default_rng(seed)
        self._trial_memory()

    def _trial_memory(self) -> None:
        cells = {(x, y) for x in range(self.size) for y in range(self.size)}
        self.key_candidates = set(cells)
        self.door_candidates = set(cells)
        self.key: tuple[int, int] | None = None
        self.door: tuple[int, int] | None = None

    def reset(self, env: Any = None) -> None:
        """A new trial (a new layout): everything learnt is dropped; ``informed`` reads the
        layout from ``env`` (a DarkKeyToDoorEnv)."""
        self._trial_memory()
        if self.kind == "informed":
            self.key, self.door = env.unwrapped.key_pos, env.unwrapped.door_pos

    def act(self, pos: tuple[int, int], has_key: bool) -> int:
        """The action at position ``pos`` (holding the key or not)."""
        if not has_key:
            goal = self.key if self.key is not None else self._nearest(pos, self.key_candidates)
        else:
            goal = self.door if self.door is not None else self._nearest(pos, self.door_candidates)
        if goal is None:
            return 0
        dx, dy = goal[0] - pos[0], goal[1] - pos[1]
        if dx == 0 and dy == 0:
            return 0  # test the cell we stand on (a no-op step picks up a key there)
        options = []
        if dx:
            options.append((int(np.sign(dx)), 0))
        if dy:
            options.append((0, int(np.sign(dy))))
        return _ACTION_OF[options[int(self.rng.integers(len(options)))]]

    def observe(self, pos: tuple[int, int], had_key: bool, reward: float, inner_done: bool) -> None:
        """What the step that reached ``pos`` showed (``had_key``: holding it before the step)."""
        if not had_key:
            if reward > 0:
                self.key = pos
            else:
                self.key_candidates.discard(pos)
        else:
            if reward > 0:
                self.door = pos
            else:
                self.door_candidates.discard(pos)
        if inner_done and self.kind == "sweep_forget":
            self._trial_memory()

    def _nearest(self, pos: tuple[int, int], cells: set[tuple[int, int]]) -> Any:
        if not cells:
            return None
        dist = {c: abs(c[0] - pos[0]) + abs(c[1] - pos[1]) for c in cells}
        best = min(dist.values())
        near = sorted(c for c, d in dist.items() if d == best)
        return near[int(self.rng.integers(len(near)))]


def play_trial(env: Any, agent: KeyDoorAgent, seed: int) -> tuple[float, list[float]]:
    """Plays one trial of a (single) DarkKeyToDoorEnv; returns its return and inner returns."""
    env.reset(seed=seed)
    agent.reset(env)
    inner: list[float] = []
    total = 0.0
    while True:
        state = env.unwrapped
        pos, had_key = state.agent_pos, state.has_key
        action = agent.act(pos, had_key)
        _, reward, terminated, truncated, info = env.step(action)
        total += reward
        done = bool(info.get("inner_episode_done"))
        # Where the step went (before an inner-episode restart moved the agent back).
        arrived = moved(pos, action, state.size)
        agent.observe(arrived, had_key, reward, done)
        if done:
            inner.append(float(info["inner_episode_return"]))
        if terminated or truncated:
            return total, inner
