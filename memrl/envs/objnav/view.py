"""The agent's egocentric view cone as fixed index tables, so a batch of views is a few gathers.

Cells of the map hold a code: ``FREE`` (0), ``WALL`` (1) or ``2 + category`` for an object. The view
is computed on an extended patch of rows ``f = 0..radius`` (cells ahead of the agent) and columns
``l = -radius..radius`` (cells to its right); row 0 only serves line of sight, the observation uses
rows ``1..radius``. Walls block sight, objects do not (they are small); a cell is visible when it is
inside the cone and no wall lies on the straight line between the agent and it.

Headings: 0 north (row - 1), 1 east (column + 1), 2 south, 3 west; turning right adds 1.
"""

from __future__ import annotations

import numpy as np

FREE = 0
WALL = 1
OBJECT0 = 2
"""Code of category 0; category c has code ``OBJECT0 + c``."""

DIRS = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], dtype=np.int64)
"""(row, column) step of each heading."""


def _round_away(x: np.ndarray) -> np.ndarray:
    # np.round rounds halves to even, which would make the cone's left and right sides differ.
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


class ViewGeometry:
    """Index tables of the view cone for maps whose flat row stride is ``stride``.

    Attributes:
        radius: view radius in cells.
        fwd, lat: (P_ext,) forward and lateral coordinate of each extended-patch cell.
        cone: (P_ext,) True where the cell is inside the view cone.
        ray: (P_ext, M) indices of the cells strictly between the agent and each cell; unused
            slots hold ``P_ext`` (a column that is never a wall).
        obs_cells: (P,) extended-patch indices of the observed rows ``f = 1..radius``.
        reach: (P_ext,) True where the cell is within the success distance.
        offsets: (4, P_ext) flat map offsets of every cell for each heading.
    """

    def __init__(self, radius: int, half_angle_deg: float, success_distance: float, stride: int):
        self.radius = radius
        f, lat = np.meshgrid(np.arange(radius + 1), np.arange(-radius, radius + 1), indexing="ij")
        self.fwd = f.ravel()
        self.lat = lat.ravel()
        n_ext = self.fwd.size
        index = {
            (int(a), int(b)): i for i, (a, b) in enumerate(zip(self.fwd, self.lat, strict=True))
        }
        angle = np.degrees(np.arctan2(np.abs(self.lat), np.maximum(self.fwd, 1e-9)))
        self.cone = (self.fwd >= 1) & (angle <= half_angle_deg + 1e-6)
        dist = np.hypot(self.fwd, self.lat)
        self.cone &= dist <= radius + 0.5
        self.reach = self.cone & (dist <= success_distance + 1e-9)

        rays: list[list[int]] = []
        for a, b in zip(self.fwd, self.lat, strict=True):
            steps = 4 * max(abs(int(a)), abs(int(b)), 1) + 1
            t = np.linspace(0.0, 1.0, steps + 2)[1:-1]
            cells = set(
                zip(
                    _round_away(t * a).astype(int).tolist(),
                    _round_away(t * b).astype(int).tolist(),
                    strict=True,
                )
            )
            cells -= {(0, 0), (int(a), int(b))}
            rays.append(sorted(index[c] for c in cells))
        width = max(1, max(len(r) for r in rays))
        self.ray = np.full((n_ext, width), n_ext, dtype=np.int64)
        for i, r in enumerate(rays):
            self.ray[i, : len(r)] = r
        self.obs_cells = np.flatnonzero(self.fwd >= 1)
        self.obs_shape = (radius, 2 * radius + 1)

        self.offsets = np.empty((4, n_ext), dtype=np.int64)
        for h in range(4):
            right = DIRS[(h + 1) % 4]
            rows = self.fwd * DIRS[h][0] + self.lat * right[0]
            cols = self.fwd * DIRS[h][1] + self.lat * right[1]
            self.offsets[h] = rows * stride + cols

    @property
    def num_ext(self) -> int:
        return int(self.fwd.size)

    def visible(self, cells: np.ndarray) -> np.ndarray:
        """Which cells of a batch of extended patches are seen.

        Args:
            cells: (B, P_ext) int8 map codes gathered at ``position + offsets[heading]``.

        Returns:
            (B, P_ext) bool.
        """
        wall = np.zeros((cells.shape[0], self.num_ext + 1), dtype=bool)
        wall[:, :-1] = cells == WALL
        blocked = wall[:, self.ray].any(axis=2)  # (B, P_ext)
        return self.cone & ~blocked
