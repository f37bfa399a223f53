"""Scripted ObjNav-lite references: an explorer that remembers the trial's layout, the same one
without memory, and the map oracle; what memory is worth on a layout, as numbers.

The explorer acts on what an agent can know: its pose (GPS and heading from the trial's start)
and the cells its view cone showed it. It keeps a map of those cells; when it has seen an object
of the target category it walks (over cells it knows are free) next to it, faces it and STOPs;
otherwise it walks to the nearest known free cell that borders unseen ones and looks there.

- ``explore_memory``: keeps its map for the whole trial (in-context memory of the layout);
- ``explore_forget``: starts a blank map at every inner episode (no memory across them);
- ``oracle``: ``ObjNavVec.oracle_actions``, shortest paths on the true map (the ceiling).

They read the view through ``ObjNavVec``'s own arrays (``visible``, the cells in the cone) rather
than decoding the observation vector: the same information, less code.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from memrl.envs.objnav.core import FORWARD, STOP, TURN_LEFT, TURN_RIGHT, ObjNavVec
from memrl.envs.objnav.view import FREE, OBJECT0

AGENTS = ("explore_memory", "explore_forget", "oracle")
UNKNOWN = -1


class ObjNavAgents:
    """One scripted agent of ``kind`` for every env of an ``ObjNavVec`` (call ``act`` every
    step, after the vec's ``reset``/``step``)."""

    def __init__(self, kind: str, vec: ObjNavVec) -> None:
        if kind not in AGENTS:
            raise ValueError(f"Unknown ObjNav agent {kind!r}. Available: {list(AGENTS)}")
        self.kind = kind
        self.vec = vec
        self.known = np.full(vec._grid.shape, UNKNOWN, np.int64)  # (N, cells) what it has seen

    def act(self) -> np.ndarray:
        """(N,) actions for the envs' current states."""
        vec = self.vec
        if self.kind == "oracle":
            return vec.oracle_actions()
        forget = vec.episode_start & (self.kind == "explore_forget")
        self.known[forget | (vec.t_trial == 0)] = UNKNOWN
        self._look()
        actions = np.empty(vec.num_envs, np.int64)
        for i in range(vec.num_envs):
            actions[i] = STOP if vec.target_in_reach[i] else self._step_towards(i)
        return actions

    def _look(self) -> None:
        vec = self.vec
        cells = vec.pos[:, None] + vec.geom.offsets[vec.heading]  # (N, P_ext) flat indices
        rows = np.broadcast_to(vec._rows[:, None], cells.shape)
        seen = vec.visible
        self.known[rows[seen], cells[seen]] = vec._grid[rows[seen], cells[seen]]
        self.known[vec._rows, vec.pos] = FREE

    def _step_towards(self, i: int) -> int:
        vec = self.vec
        known = self.known[i]
        moves = vec._moves
        goal_cells = np.flatnonzero(known == OBJECT0 + vec.target[i])
        # Cells next to a known target object: standing there facing it puts it in reach.
        near = {int(c + m) for c in goal_cells for m in moves if known[c + m] == FREE}
        path = _bfs(known, int(vec.pos[i]), near, moves)
        exploring = path is None
        if exploring:  # no target seen yet, or no known way to it: look further
            free = known == FREE
            unknown_next = np.zeros_like(free)
            for m in moves:
                unknown_next |= np.roll(known, -m) == UNKNOWN
            path = _bfs(known, int(vec.pos[i]), set(np.flatnonzero(free & unknown_next)), moves)
        if path is None:
            return TURN_LEFT  # nothing reachable to go to: look around
        if len(path) == 1:  # at the goal: face the target object or the unseen neighbour
            want = [
                h
                for h, m in enumerate(moves)
                if known[path[0] + m] == (UNKNOWN if exploring else OBJECT0 + vec.target[i])
            ]
            return _turn_to(int(vec.heading[i]), want[0] if want else (vec.heading[i] + 1) % 4)
        step = path[1] - path[0]
        heading = int(np.flatnonzero(moves == step)[0])
        if heading == vec.heading[i]:
            return FORWARD
        return _turn_to(int(vec.heading[i]), heading)


def _turn_to(heading: int, want: int) -> int:
    if want == heading:
        return FORWARD
    return TURN_RIGHT if (want - heading) % 4 in (1, 2) else TURN_LEFT


def _bfs(known: np.ndarray, start: int, goals: set[int], moves: np.ndarray) -> list[int] | None:
    """Shortest path (flat cells, start first) over known free cells to any goal; None if none."""
    if not goals:
        return None
    parent = {start: -1}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell in goals:
            path = [cell]
            while parent[path[-1]] != -1:
                path.append(parent[path[-1]])
            return path[::-1]
        for m in moves:
            nxt = int(cell + m)
            if nxt not in parent and known[nxt] == FREE:
                parent[nxt] = cell
                queue.append(nxt)
    return None
