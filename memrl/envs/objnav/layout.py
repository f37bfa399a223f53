"""Procedural multi-room layouts of ObjNav-lite and their shortest-path distance maps.

A layout is drawn once per trial: binary space partition of the map into rooms separated by
one-cell walls, doors that connect every room (a random spanning tree of the room graph plus extra
doors that make loops), and ``K x instances`` objects on free cells away from doors. Objects block
movement. For each category the goal cells are the free cells from which an instance is visible
within reach for some heading; a multi-source BFS from them gives the distance map that drives the
shaped reward, the inner episodes' start distances and SPL.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memrl.envs.objnav.config import ObjNavConfig
from memrl.envs.objnav.view import FREE, OBJECT0, WALL, ViewGeometry

UNREACHABLE = np.iinfo(np.int16).max
"""Distance of cells from which the goal cannot be reached (walls, objects)."""

_MAX_PLACEMENT_TRIES = 100


@dataclass(frozen=True)
class Layout:
    """One map, padded by ``pad`` wall cells on every side so views never leave the array."""

    grid: np.ndarray
    """(S, S) int8 cell codes, S = grid_size + 2 pad."""
    pad: int
    """Width of the wall border added around the map."""
    goal_dist: np.ndarray
    """(K, S * S) int16 shortest-path distance (cells) to the nearest goal cell of each category."""
    free: np.ndarray
    """(F,) int64 flat indices of the free cells."""
    objects: np.ndarray
    """(K * instances, 3) int64 rows (row, column, category) of the objects, padded coordinates."""
    rooms: int
    """Rooms the partition produced (can be fewer than asked when they do not fit)."""


def _split_rooms(cfg: ObjNavConfig, rng: np.random.Generator, grid: np.ndarray) -> list[tuple]:
    """Draws the room walls into ``grid``; returns the rooms as (y0, x0, y1, x1), ends exclusive."""
    size, m = cfg.grid_size, cfg.min_room_size
    rooms = [(1, 1, size - 1, size - 1)]
    while len(rooms) < cfg.rooms:
        splittable = [r for r in rooms if r[2] - r[0] >= 2 * m + 1 or r[3] - r[1] >= 2 * m + 1]
        if not splittable:
            break
        y0, x0, y1, x1 = max(
            splittable, key=lambda r: ((r[2] - r[0]) * (r[3] - r[1]), rng.random())
        )
        rooms.remove((y0, x0, y1, x1))
        h, w = y1 - y0, x1 - x0
        split_rows = h >= 2 * m + 1 and (h > w or w < 2 * m + 1 or (h == w and rng.random() < 0.5))
        if split_rows:
            s = int(rng.integers(y0 + m, y1 - m))
            grid[s, x0:x1] = WALL
            rooms += [(y0, x0, s, x1), (s + 1, x0, y1, x1)]
        else:
            s = int(rng.integers(x0 + m, x1 - m))
            grid[y0:y1, s] = WALL
            rooms += [(y0, x0, y1, s), (y0, s + 1, y1, x1)]
    return rooms


def _add_doors(
    cfg: ObjNavConfig, rng: np.random.Generator, grid: np.ndarray, rooms: list[tuple]
) -> list[tuple[int, int]]:
    """Carves one-cell doors until all rooms connect, plus extra ones; returns the door cells."""
    label = np.full(grid.shape, -1, dtype=np.int64)
    for i, (y0, x0, y1, x1) in enumerate(rooms):
        label[y0:y1, x0:x1] = i
    candidates: dict[tuple[int, int], list[tuple[int, int]]] = {}
    size = grid.shape[0]
    for y in range(1, size - 1):
        for x in range(1, size - 1):
            if grid[y, x] != WALL:
                continue
            for a, b in ((label[y - 1, x], label[y + 1, x]), (label[y, x - 1], label[y, x + 1])):
                if a >= 0 and b >= 0 and a != b:
                    candidates.setdefault((min(a, b), max(a, b)), []).append((y, x))
    parent = list(range(len(rooms)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    doors = []
    pairs = list(candidates)
    for k in rng.permutation(len(pairs)):
        a, b = pairs[k]
        joins = find(a) != find(b)
        if joins or rng.random() < cfg.extra_door_prob:
            cells = candidates[(a, b)]
            y, x = cells[int(rng.integers(len(cells)))]
            grid[y, x] = FREE
            doors.append((y, x))
            parent[find(a)] = find(b)
    return doors


def _flood(passable: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """Multi-source BFS over 4-neighbours, batched over a leading axis.

    Args:
        passable: (S, S) bool.
        sources: (B, S, S) bool.

    Returns:
        (B, S, S) int16 distances, ``UNREACHABLE`` where not reached.
    """
    dist = np.full(sources.shape, UNREACHABLE, dtype=np.int16)
    frontier = sources & passable
    dist[frontier] = 0
    seen = frontier.copy()
    d = 0
    while frontier.any():
        d += 1
        grown = np.zeros_like(frontier)
        grown[:, 1:, :] |= frontier[:, :-1, :]
        grown[:, :-1, :] |= frontier[:, 1:, :]
        grown[:, :, 1:] |= frontier[:, :, :-1]
        grown[:, :, :-1] |= frontier[:, :, 1:]
        frontier = grown & passable & ~seen
        seen |= frontier
        dist[frontier] = d
    return dist


def _goal_cells(grid: np.ndarray, free: np.ndarray, geom: ViewGeometry, k: int) -> np.ndarray:
    """(K, S * S) bool: free cells from which an instance of each category is seen within reach."""
    flat = grid.ravel()
    idx = free[:, None, None] + geom.offsets[None, :, :]  # (F, 4, P_ext)
    cells = flat[idx].reshape(-1, geom.num_ext)  # (F * 4, P_ext)
    hits = geom.visible(cells) & geom.reach & (cells >= OBJECT0)
    rows, cols = np.nonzero(hits)
    goal = np.zeros((k, flat.size), dtype=bool)
    goal[cells[rows, cols].astype(np.int64) - OBJECT0, free[rows // 4]] = True
    return goal


def generate_layout(cfg: ObjNavConfig, rng: np.random.Generator, geom: ViewGeometry) -> Layout:
    """Draws one layout (rooms, doors, objects) and its per-category distance maps.

    Args:
        cfg: the env configuration.
        rng: the layout's generator (one per trial keeps layouts reproducible from the seed).
        geom: view tables built for stride ``grid_size + 2 * view_radius``.
    """
    size, pad = cfg.grid_size, cfg.view_radius
    base = np.zeros((size, size), dtype=np.int8)
    base[0, :] = base[-1, :] = base[:, 0] = base[:, -1] = WALL
    rooms = _split_rooms(cfg, rng, base)
    doors = _add_doors(cfg, rng, base, rooms)

    near_door = np.zeros_like(base, dtype=bool)
    for y, x in doors:
        near_door[max(0, y - 1) : y + 2, max(0, x - 1) : x + 2] = True
    spots = np.flatnonzero((base == FREE) & ~near_door)
    n_obj = cfg.num_categories * cfg.instances_per_category
    if spots.size < n_obj:
        raise ValueError(
            f"ObjNav layout has {spots.size} cells for {n_obj} objects; raise grid_size or lower "
            "num_categories / instances_per_category / rooms"
        )
    categories = np.repeat(np.arange(cfg.num_categories), cfg.instances_per_category)
    stride = size + 2 * pad
    for _ in range(_MAX_PLACEMENT_TRIES):
        grid2d = base.copy()
        chosen = rng.choice(spots, size=n_obj, replace=False)
        grid2d.flat[chosen] = (OBJECT0 + categories).astype(np.int8)
        grid = np.full((stride, stride), WALL, dtype=np.int8)
        grid[pad : pad + size, pad : pad + size] = grid2d
        passable = grid == FREE
        free = np.flatnonzero(passable)
        start = np.zeros((1,) + grid.shape, dtype=bool)
        start.flat[free[0]] = True
        if (_flood(passable, start)[0].ravel()[free] == UNREACHABLE).any():
            continue  # objects cut the free space apart
        goal = _goal_cells(grid, free, geom, cfg.num_categories)
        if not goal.any(axis=1).all():
            continue
        goal_dist = _flood(passable, goal.reshape((-1,) + grid.shape)).reshape(goal.shape[0], -1)
        ys, xs = np.divmod(chosen, size)
        objects = np.stack([ys + pad, xs + pad, categories], axis=1).astype(np.int64)
        return Layout(grid, pad, goal_dist, free, objects, len(rooms))
    raise RuntimeError(
        f"ObjNav could not place {n_obj} objects without cutting the map apart in "
        f"{_MAX_PLACEMENT_TRIES} tries; raise grid_size or lower the number of objects"
    )
