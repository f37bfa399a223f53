"""Top-down RGB pictures of ObjNav-lite for humans: frames, a PNG and a short GIF of an episode.

The frame shows walls (dark), floor (light), objects coloured by category (the target's instances
with a white ring), the cells the agent sees now (tinted yellow), and the agent as a red triangle
that points along its heading. A bar on top has the target's colour.
"""

from __future__ import annotations

import colorsys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from memrl.envs.objnav.view import FREE, OBJECT0, WALL

if TYPE_CHECKING:
    from memrl.envs.objnav.core import ObjNavVec

_FLOOR = np.array([232, 228, 218], dtype=np.float32)
_WALL = np.array([60, 60, 70], dtype=np.float32)
_SEEN = np.array([250, 220, 80], dtype=np.float32)
_AGENT = np.array([220, 40, 40], dtype=np.uint8)


def category_colors(k: int) -> np.ndarray:
    """(K, 3) uint8 distinct colours, hues spread evenly, two brightness levels alternating."""
    colors = [colorsys.hsv_to_rgb(i / k, 0.85, 0.9 if i % 2 == 0 else 0.6) for i in range(k)]
    return (np.array(colors) * 255).astype(np.uint8)


def render_frame(vec: ObjNavVec, env_index: int = 0, cell_px: int = 12) -> np.ndarray:
    """The current state of one env of a batch as an (H, W, 3) uint8 image.

    Args:
        vec: the batched core.
        env_index: which env to draw.
        cell_px: pixels per cell side (>= 4).
    """
    if cell_px < 4:
        raise ValueError(f"cell_px must be >= 4, got {cell_px}")
    layout = vec.layouts[env_index]
    if layout is None:
        raise ValueError("ObjNav render before reset(): call reset() first")
    pad, size = layout.pad, vec.cfg.grid_size
    grid = layout.grid[pad : pad + size, pad : pad + size]
    img = np.empty((size, size, 3), dtype=np.float32)
    img[grid == FREE] = _FLOOR
    img[grid == WALL] = _WALL
    objects = grid >= OBJECT0
    colors = category_colors(vec.cfg.num_categories).astype(np.float32)
    img[objects] = colors[grid[objects].astype(np.int64) - OBJECT0]

    seen = np.zeros(vec.stride * vec.stride, dtype=bool)
    cells = vec.pos[env_index] + vec.geom.offsets[vec.heading[env_index]]
    seen[cells[vec.visible[env_index]]] = True
    seen = seen.reshape(vec.stride, vec.stride)[pad : pad + size, pad : pad + size]
    img[seen] = 0.55 * img[seen] + 0.45 * _SEEN

    big = np.repeat(np.repeat(img.astype(np.uint8), cell_px, axis=0), cell_px, axis=1)
    target = int(vec.target[env_index])
    ring = _ring_mask(cell_px)
    for y, x in np.argwhere(grid == OBJECT0 + target):
        block = big[y * cell_px : (y + 1) * cell_px, x * cell_px : (x + 1) * cell_px]
        block[ring] = 255
    ay, ax = vec.positions()[env_index]
    block = big[ay * cell_px : (ay + 1) * cell_px, ax * cell_px : (ax + 1) * cell_px]
    block[_triangle_mask(cell_px, int(vec.heading[env_index]))] = _AGENT

    bar = np.empty((max(4, cell_px // 2), big.shape[1], 3), dtype=np.uint8)
    bar[:] = colors[target].astype(np.uint8)
    return np.concatenate([bar, big], axis=0)


def _ring_mask(px: int) -> np.ndarray:
    yy, xx = np.mgrid[0:px, 0:px]
    w = max(1, px // 6)
    return (yy < w) | (xx < w) | (yy >= px - w) | (xx >= px - w)


def _triangle_mask(px: int, heading: int) -> np.ndarray:
    """A triangle pointing north, rotated to the heading (0 N, 1 E, 2 S, 3 W)."""
    yy, xx = np.mgrid[0:px, 0:px].astype(np.float32)
    u = (yy + 0.5) / px  # 0 at the top
    v = np.abs((xx + 0.5) / px - 0.5)
    mask = (u >= 0.1) & (u <= 0.9) & (v <= 0.45 * (u - 0.1) / 0.8)
    return np.rot90(mask, k=-heading)


def save_png(frame: np.ndarray, path: str | Path) -> Path:
    """Writes one (H, W, 3) uint8 frame as a PNG."""
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(frame).save(path)
    return path


def save_gif(frames: list[np.ndarray], path: str | Path, fps: int = 8) -> Path:
    """Writes frames as a looping GIF."""
    from PIL import Image

    if not frames:
        raise ValueError("save_gif got no frames")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return path


def record_episode(
    env: gym.Env,
    path_prefix: str | Path,
    policy: str | Callable[[np.ndarray], int] = "oracle",
    max_steps: int = 120,
    fps: int = 8,
    seed: int | None = None,
) -> dict[str, Any]:
    """Plays one inner episode and writes ``PREFIX.png`` (its first frame) and ``PREFIX.gif``.

    Args:
        env: an ObjNavEnv (env.py, which renders with this module) built with
            ``render_mode="rgb_array"``.
        path_prefix: where to write, without extension.
        policy: ``"oracle"`` (shortest path, knows the map), ``"random"``, or a callable that maps
            an observation to an action.
        max_steps: frames at most (the GIF stays short).
        fps: GIF speed.
        seed: reset seed.

    Returns:
        ``{"png": path, "gif": path, "steps": int, "success": bool, "spl": float}``.
    """
    if env.render_mode != "rgb_array":
        raise ValueError(
            "record_episode needs an env made with render_mode='rgb_array', "
            f"got {env.render_mode!r}"
        )
    if isinstance(policy, str) and policy not in ("oracle", "random"):
        raise ValueError(f"policy must be 'oracle', 'random' or a callable, got {policy!r}")
    obs, _ = env.reset(seed=seed)
    frames = [env.render()]
    info: dict[str, Any] = {}
    steps = 0
    while steps < max_steps:
        if policy == "oracle":
            action = int(env.vec.oracle_actions()[0])
        elif policy == "random":
            action = int(env.action_space.sample())
        else:
            action = int(policy(obs))
        obs, _, _, truncated, info = env.step(action)
        steps += 1
        if info.get("inner_episode_done") or truncated:
            break
        frames.append(env.render())
    prefix = Path(path_prefix)
    png = save_png(frames[0], prefix.with_suffix(".png"))
    gif = save_gif(frames, prefix.with_suffix(".gif"), fps=fps)
    return {
        "png": png,
        "gif": gif,
        "steps": steps,
        "success": bool(info.get("inner_episode_success", False)),
        "spl": float(info.get("inner_episode_spl", 0.0)),
    }
