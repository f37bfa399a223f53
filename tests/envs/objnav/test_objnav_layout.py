"""Layouts and view geometry of ObjNav-lite, checked against slow reference computations."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from memrl.envs.objnav import ObjNavConfig
from memrl.envs.objnav.layout import UNREACHABLE, generate_layout
from memrl.envs.objnav.view import DIRS, FREE, OBJECT0, WALL, ViewGeometry


def _geom(cfg: ObjNavConfig) -> ViewGeometry:
    return ViewGeometry(
        cfg.view_radius,
        cfg.view_half_angle,
        cfg.success_distance,
        cfg.grid_size + 2 * cfg.view_radius,
    )


def _bfs(grid: np.ndarray, sources: list[tuple[int, int]]) -> dict[tuple[int, int], int]:
    dist = {s: 0 for s in sources}
    queue = deque(sources)
    while queue:
        y, x = queue.popleft()
        for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nxt = (y + dy, x + dx)
            if grid[nxt] == FREE and nxt not in dist:
                dist[nxt] = dist[(y, x)] + 1
                queue.append(nxt)
    return dist


def _slow_visible(grid: np.ndarray, y: int, x: int, h: int, cfg: ObjNavConfig) -> set:
    """Visible cells by the definition: in the cone, no wall on the sampled line of sight."""
    seen = set()
    r = cfg.view_radius
    right = DIRS[(h + 1) % 4]
    for f in range(1, r + 1):
        for lat in range(-r, r + 1):
            if math.degrees(math.atan2(abs(lat), f)) > cfg.view_half_angle + 1e-6:
                continue
            if math.hypot(f, lat) > r + 0.5:
                continue
            blocked = False
            n = 4 * max(f, abs(lat)) + 1
            for i in range(1, n + 1):
                t = i / (n + 1)
                a = math.copysign(math.floor(abs(t * f) + 0.5), t * f)
                b = math.copysign(math.floor(abs(t * lat) + 0.5), t * lat)
                if (a, b) in ((0, 0), (f, lat)):
                    continue
                cy = y + int(a) * DIRS[h][0] + int(b) * right[0]
                cx = x + int(a) * DIRS[h][1] + int(b) * right[1]
                blocked |= grid[cy, cx] == WALL
            if not blocked:
                seen.add((y + f * DIRS[h][0] + lat * right[0], x + f * DIRS[h][1] + lat * right[1]))
    return seen


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layout_is_connected_and_distances_match_bfs(seed):
    cfg = ObjNavConfig(seed=seed)
    layout = generate_layout(cfg, np.random.default_rng(seed), _geom(cfg))
    grid = layout.grid
    free = [tuple(int(v) for v in np.unravel_index(i, grid.shape)) for i in layout.free]
    assert len(_bfs(grid, [free[0]])) == len(free)  # every free cell reachable from any other
    assert layout.rooms == cfg.rooms
    cats = sorted(layout.objects[:, 2].tolist())
    assert cats == list(range(cfg.num_categories))
    for y, x, c in layout.objects:
        assert grid[y, x] == OBJECT0 + c
    # Category 3's distance map equals a plain BFS from its goal cells.
    dist = layout.goal_dist[3].reshape(grid.shape)
    goals = [tuple(int(v) for v in p) for p in np.argwhere(dist == 0)]
    assert goals
    ref = _bfs(grid, goals)
    for cell in free:
        assert dist[cell] == ref[cell] < UNREACHABLE
    assert (dist[grid != FREE] == UNREACHABLE).all()


def test_goal_cells_see_the_target_within_reach():
    cfg = ObjNavConfig(seed=5)
    geom = _geom(cfg)
    layout = generate_layout(cfg, np.random.default_rng(5), geom)
    grid = layout.grid
    for c in (0, 7):
        dist = layout.goal_dist[c].reshape(grid.shape)
        targets = {(int(y), int(x)) for y, x, k in layout.objects if k == c}
        for y, x in np.argwhere(dist == 0):
            ok = any(
                cell in targets and math.dist(cell, (y, x)) <= cfg.success_distance
                for h in range(4)
                for cell in _slow_visible(grid, int(y), int(x), h, cfg)
            )
            assert ok, (c, y, x)


def test_view_matches_slow_reference_on_random_poses():
    cfg = ObjNavConfig(seed=9, view_radius=5, view_half_angle=60.0)
    geom = _geom(cfg)
    layout = generate_layout(cfg, np.random.default_rng(9), geom)
    rng = np.random.default_rng(0)
    stride = layout.grid.shape[1]
    for pos in rng.choice(layout.free, size=40, replace=False):
        y, x = divmod(int(pos), stride)
        for h in range(4):
            cells = layout.grid.ravel()[pos + geom.offsets[h]][None, :]
            vis = geom.visible(cells)[0]
            fast = {divmod(int(pos + geom.offsets[h][p]), stride) for p in np.flatnonzero(vis)}
            assert fast == _slow_visible(layout.grid, y, x, h, cfg)


def test_walls_block_sight():
    cfg = ObjNavConfig(grid_size=12, rooms=1, num_categories=1)
    geom = _geom(cfg)
    grid = np.full((20, 20), FREE, dtype=np.int8)
    grid[7, 5:15] = WALL  # a wall two cells north of the agent at (9, 10)
    pos = 9 * 20 + 10
    vis = geom.visible(grid.ravel()[pos + geom.offsets[0]][None, :])[0]
    rows = {divmod(int(pos + geom.offsets[0][p]), 20)[0] for p in np.flatnonzero(vis)}
    assert rows == {8, 7}  # the row before the wall and the wall itself; nothing beyond


def test_layouts_reproduce_from_seed_and_differ_between_draws():
    cfg = ObjNavConfig()
    geom = _geom(cfg)
    a = generate_layout(cfg, np.random.default_rng(42), geom)
    b = generate_layout(cfg, np.random.default_rng(42), geom)
    c = generate_layout(cfg, np.random.default_rng(43), geom)
    assert np.array_equal(a.grid, b.grid)
    assert not np.array_equal(a.grid, c.grid)


def test_config_rejects_bad_values_with_the_field_name():
    with pytest.raises(ValueError, match="grid_size"):
        ObjNavConfig(grid_size=3)
    with pytest.raises(ValueError, match="success_distance"):
        ObjNavConfig(view_radius=2, success_distance=3.0)
    with pytest.raises(ValueError, match="objects"):
        ObjNavConfig(grid_size=10, num_categories=20, instances_per_category=2)
    with pytest.raises(ValueError, match=r"Unknown ObjNav config keys \['gridsize'\]"):
        ObjNavConfig.from_kwargs({"gridsize": 10})
