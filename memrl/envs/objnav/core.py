"""ObjNavVec: N ObjNav-lite envs stepped together with numpy (no Python loop over envs per step).

Each env runs trials: ``trial_len`` steps in one layout. Inside a trial, inner episodes (a new start
pose and target category in the same layout) end on STOP (with ``failed_stop_ends=False`` only on
a successful one) or after ``episode_len`` steps, and the next one starts at once, so ``step``
never needs a reset until the trial ends. Layouts are drawn per env from that env's own generator
(only when a trial starts: a short Python loop over the envs whose trials end); start poses and
targets are drawn for all envs from one batched generator.

Observation (float32 vector per env; ``ObjNavVec.obs_slices`` names the parts):

- ``view`` (R * (2R + 1) * (2 + K), or (3 + K) with ``target_channel``): the egocentric patch,
  rows = distance ahead 1..R, columns = lateral offset -R..R (left to right), channels = [seen,
  wall, (target,) category 0..K-1]; all zero where unseen (outside the cone or behind a wall);
- ``target`` (K): one-hot of the target category;
- ``gps`` (4): position relative to the trial's start pose (cells ahead, cells to the right, both
  divided by grid_size), then sin and cos of the heading relative to the start heading
  (clockwise positive: a right turn from the start pose gives sin = 1);
- ``prev_action`` (4): one-hot of the previous action (zeros at a trial's first step);
- ``prev_reward`` (1) and ``episode_start`` (1): the previous reward (with ``reward_obs="task"``
  only its success / failed-STOP part), and 1 at an inner episode's first step (in-context RL
  inputs, as in Dark-Key-To-Door).

Actions: 0 stop, 1 forward (one cell; blocked by walls and objects), 2 turn left, 3 turn right.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memrl.envs.objnav.config import ObjNavConfig
from memrl.envs.objnav.layout import UNREACHABLE, Layout, generate_layout
from memrl.envs.objnav.view import DIRS, OBJECT0, WALL, ViewGeometry

STOP, FORWARD, TURN_LEFT, TURN_RIGHT = 0, 1, 2, 3
NUM_ACTIONS = 4
ACTION_NAMES = ("stop", "forward", "turn_left", "turn_right")


@dataclass
class StepResult:
    """What one batched step returns; arrays are (N,) unless noted."""

    obs: np.ndarray
    """(N, obs_dim) float32; a buffer the next step overwrites (copy to keep)."""
    reward: np.ndarray
    """float32 rewards."""
    trial_done: np.ndarray
    """bool: the trial ended at this step (a time limit: gymnasium's ``truncated``)."""
    episode_done: np.ndarray
    """bool: an inner episode ended at this step (STOP or its step limit)."""
    success: np.ndarray
    """bool: the inner episode that ended here succeeded."""
    spl: np.ndarray
    """float32 SPL of the inner episode that ended here (0 where none ended)."""
    episode_length: np.ndarray
    """int64 steps of the inner episode that ended here."""


class ObjNavVec:
    """N ObjNav-lite envs; ``reset`` then ``step(actions)`` in lockstep.

    Args:
        num_envs: N.
        config: the env configuration (``seed`` seeds all N envs; env i uses a child seed).
        autoreset: start a new trial (new layout) in envs whose trial ended during ``step``; their
            rows of ``obs`` then hold the new trial's first observation.
    """

    def __init__(self, num_envs: int, config: ObjNavConfig | None = None, autoreset: bool = True):
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"ObjNavVec num_envs must be an int >= 1, got {num_envs!r}")
        self.cfg = config or ObjNavConfig()
        self.num_envs = n = num_envs
        self.autoreset = autoreset
        cfg = self.cfg
        k, r = cfg.num_categories, cfg.view_radius
        self.stride = cfg.grid_size + 2 * r
        self.geom = ViewGeometry(r, cfg.view_half_angle, cfg.success_distance, self.stride)
        self._moves = DIRS[:, 0] * self.stride + DIRS[:, 1]  # (4,) flat step per heading

        # View channels: seen, wall, [target,] one per category.
        self._cat0 = 3 if cfg.target_channel else 2
        n_view = self.geom.obs_cells.size * (self._cat0 + k)
        sizes = {
            "view": n_view,
            "target": k,
            "gps": 4,
            "prev_action": NUM_ACTIONS,
            "prev_reward": 1,
            "episode_start": 1,
        }
        self.obs_slices: dict[str, slice] = {}
        start = 0
        for name, size in sizes.items():
            self.obs_slices[name] = slice(start, start + size)
            start += size
        self.obs_dim = start
        self.view_shape = (*self.geom.obs_shape, self._cat0 + k)

        cells = self.stride * self.stride
        self._grid = np.zeros((n, cells), dtype=np.int8)
        self._dist = np.zeros((n, k * cells), dtype=np.int16)
        self._free = np.zeros((n, cells), dtype=np.int64)
        self._free_count = np.zeros(n, dtype=np.int64)
        self.layouts: list[Layout | None] = [None] * n

        self.pos = np.zeros(n, dtype=np.int64)
        self.heading = np.zeros(n, dtype=np.int64)
        self.target = np.zeros(n, dtype=np.int64)
        self.start_pos = np.zeros(n, dtype=np.int64)
        self.start_heading = np.zeros(n, dtype=np.int64)
        self.t_episode = np.zeros(n, dtype=np.int64)
        self.t_trial = np.zeros(n, dtype=np.int64)
        self.episode_index = np.zeros(n, dtype=np.int64)
        self.dist = np.zeros(n, dtype=np.int64)
        self.start_dist = np.zeros(n, dtype=np.int64)
        self.path_length = np.zeros(n, dtype=np.int64)
        self.episode_return = np.zeros(n, dtype=np.float64)
        self.prev_action = np.full(n, -1, dtype=np.int64)
        self.prev_reward = np.zeros(n, dtype=np.float32)
        self.episode_start = np.ones(n, dtype=bool)
        self.target_in_reach = np.zeros(n, dtype=bool)
        self.trial_targets = np.ones((n, k), dtype=bool)
        """(N, K) the categories this trial's inner episodes may target (all unless
        ``targets_per_trial`` is set)."""
        self.visible = np.zeros((n, self.geom.num_ext), dtype=bool)
        """(N, P_ext) the cells each agent sees now (for rendering)."""
        # Per-trial totals over finished inner episodes.
        self.trial_episodes = np.zeros(n, dtype=np.int64)
        self.trial_successes = np.zeros(n, dtype=np.int64)
        self.trial_spl = np.zeros(n, dtype=np.float64)
        self.trial_return = np.zeros(n, dtype=np.float64)

        self._obs = np.zeros((n, self.obs_dim), dtype=np.float32)
        self._rows = np.arange(n)
        self._layout_rngs: list[np.random.Generator] = []
        self._rng = np.random.default_rng()
        self.seed(cfg.seed)

    def seed(self, seed: int | None) -> None:
        """Re-seeds layouts (one child generator per env) and the batched episode sampler."""
        root = np.random.SeedSequence(seed)
        children = root.spawn(self.num_envs + 1)
        self._rng = np.random.default_rng(children[0])
        self._layout_rngs = [np.random.default_rng(c) for c in children[1:]]

    def obs_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(obs_dim,) lower and upper bounds of the observation vector."""
        low = np.zeros(self.obs_dim, dtype=np.float32)
        high = np.ones(self.obs_dim, dtype=np.float32)
        low[self.obs_slices["gps"]] = -1.0
        cfg = self.cfg
        # A step changes the distance by at most one cell; with trial_potential shaping the step
        # that starts the next inner episode also pays the potential's move, and with
        # episode_refund a failed STOP pays back its inner episode's distance reward: each at
        # most the longest path on the map (fewer cells than the map has).
        cells = 1 + (cfg.grid_size**2 if cfg.shaping != "episode" else 0)
        if cfg.reward_obs == "task":  # only the success reward and the failed-STOP penalty
            low[self.obs_slices["prev_reward"]] = -cfg.failed_stop_penalty
            high[self.obs_slices["prev_reward"]] = cfg.success_reward
        else:
            low[self.obs_slices["prev_reward"]] = (
                -cfg.step_cost - cfg.failed_stop_penalty - cfg.distance_reward_scale * cells
            )
            high[self.obs_slices["prev_reward"]] = (
                cfg.success_reward + cfg.distance_reward_scale * cells
            )
        return low, high

    # ---- trials and inner episodes -------------------------------------------------------------

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Starts a new trial in every env; returns the (N, obs_dim) first observations."""
        if seed is not None:
            self.seed(seed)
        self.reset_trials(self._rows)
        self._observe()
        return self._obs

    def reset_trials(self, envs: np.ndarray) -> None:
        """Draws new layouts for ``envs`` and starts their first inner episode (no observation)."""
        envs = np.asarray(envs, dtype=np.int64)
        for i in envs.tolist():
            layout = generate_layout(self.cfg, self._layout_rngs[i], self.geom)
            self.layouts[i] = layout
            self._grid[i] = layout.grid.ravel()
            self._dist[i] = layout.goal_dist.ravel()
            self._free[i, : layout.free.size] = layout.free
            self._free_count[i] = layout.free.size
        self.t_trial[envs] = 0
        self.episode_index[envs] = -1
        self.prev_action[envs] = -1
        self.prev_reward[envs] = 0.0
        self.trial_episodes[envs] = 0
        self.trial_successes[envs] = 0
        self.trial_spl[envs] = 0.0
        self.trial_return[envs] = 0.0
        m = self.cfg.targets_per_trial
        if m is not None:
            # The m categories with the highest random scores: a uniform m-subset per env.
            scores = self._rng.random((envs.size, self.cfg.num_categories))
            self.trial_targets[envs] = scores >= np.sort(scores, axis=1)[:, -m, None]
        self._start_episodes(envs)
        self.start_pos[envs] = self.pos[envs]
        self.start_heading[envs] = self.heading[envs]

    def _start_episodes(self, envs: np.ndarray) -> None:
        """New start pose and target for ``envs``, keeping the start at least min_start_distance."""
        cells = self.stride * self.stride
        k = self.cfg.num_categories
        todo = envs
        while todo.size:
            pick = (self._rng.random(todo.size) * self._free_count[todo]).astype(np.int64)
            pos = self._free[todo, pick]
            # (T, K) distance from the start to each category's goal cells.
            d = self._dist[todo[:, None], np.arange(k)[None, :] * cells + pos[:, None]]
            ok = (d >= self.cfg.min_start_distance) & (d < UNREACHABLE) & self.trial_targets[todo]
            scores = np.where(ok, self._rng.random(ok.shape), -1.0)
            target = scores.argmax(axis=1)
            good = ok.any(axis=1)
            done = todo[good]
            self.pos[done] = pos[good]
            self.target[done] = target[good]
            self.heading[done] = self._rng.integers(0, 4, size=done.size)
            self.dist[done] = d[good, target[good]]
            todo = todo[~good]
        self.start_dist[envs] = self.dist[envs]
        self.t_episode[envs] = 0
        self.path_length[envs] = 0
        self.episode_return[envs] = 0.0
        self.episode_index[envs] += 1
        self.episode_start[envs] = True

    # ---- the step ------------------------------------------------------------------------------

    def step(self, actions: np.ndarray) -> StepResult:
        """Steps all N envs.

        Args:
            actions: (N,) ints in [0, 4).
        """
        a = np.asarray(actions)
        if a.shape != (self.num_envs,) or a.dtype.kind not in "iu":
            raise ValueError(
                f"ObjNavVec.step expects an int array of shape ({self.num_envs},), got "
                f"dtype {a.dtype} shape {a.shape}"
            )
        if a.size and (a.min() < 0 or a.max() >= NUM_ACTIONS):
            raise ValueError(f"ObjNav actions must be in [0, {NUM_ACTIONS}), got {a.tolist()}")
        a = a.astype(np.int64)
        rows = self._rows
        cfg = self.cfg

        nxt = self.pos + self._moves[self.heading]
        moved = (a == FORWARD) & (self._grid[rows, nxt] == 0)
        self.pos = np.where(moved, nxt, self.pos)
        self.path_length += moved
        self.heading = (self.heading + (a == TURN_RIGHT) - (a == TURN_LEFT)) % 4
        stop = a == STOP
        success = stop & self.target_in_reach
        failed_stop = stop & ~success

        cells = self.stride * self.stride
        new_dist = self._dist[rows, self.target * cells + self.pos].astype(np.int64)
        reward = (
            cfg.success_reward * success
            - cfg.step_cost
            - cfg.failed_stop_penalty * failed_stop
            + cfg.distance_reward_scale * (self.dist - new_dist)
        ).astype(np.float32)
        self.dist = new_dist
        self.t_episode += 1
        self.t_trial += 1
        ends = success | failed_stop if cfg.failed_stop_ends else success
        episode_done = ends | (self.t_episode >= cfg.episode_len)
        trial_done = self.t_trial >= cfg.trial_len

        spl = np.where(
            success, self.start_dist / np.maximum(self.start_dist, self.path_length), 0.0
        ).astype(np.float32)
        episode_length = np.where(episode_done, self.t_episode, 0)
        self.trial_episodes += episode_done
        self.trial_successes += success
        self.trial_spl += spl
        self.prev_action = a
        self.episode_start[:] = False

        if cfg.shaping == "episode_refund" and cfg.failed_stop_ends:
            # A failed STOP gives back what its inner episode gained (or lost) in distance reward.
            reward -= np.where(
                failed_stop, cfg.distance_reward_scale * (self.start_dist - self.dist), 0.0
            ).astype(np.float32)
        restart = np.flatnonzero(episode_done & ~trial_done)
        if restart.size:
            end_dist = self.dist[restart]
            self._start_episodes(restart)
            if cfg.shaping == "trial_potential":
                # One potential over the trial: its move to the next start and target is paid
                # with this step, so a trial's distance rewards telescope (nothing to farm).
                reward[restart] += cfg.distance_reward_scale * (end_dist - self.dist[restart])
        # The step's reward belongs to the inner episode it ended (restarted ones count from 0).
        ongoing = np.ones(self.num_envs, bool)
        ongoing[restart] = False
        self.episode_return += np.where(ongoing, reward, 0.0)
        self.trial_return += reward
        if cfg.reward_obs == "task":
            self.prev_reward = (
                cfg.success_reward * success - cfg.failed_stop_penalty * failed_stop
            ).astype(np.float32)
        else:
            self.prev_reward = reward
        if self.autoreset:
            ended = np.flatnonzero(trial_done)
            if ended.size:
                self.reset_trials(ended)
        self._observe()
        return StepResult(self._obs, reward, trial_done, episode_done, success, spl, episode_length)

    # ---- observation ---------------------------------------------------------------------------

    def _observe(self) -> None:
        """Writes every env's observation into the shared buffer and caches what STOP needs."""
        geom, k = self.geom, self.cfg.num_categories
        rows = self._rows
        cells = self._grid[rows[:, None], self.pos[:, None] + geom.offsets[self.heading]]  # (N, Pe)
        vis = geom.visible(cells)
        self.visible = vis
        self.target_in_reach = (vis & geom.reach & (cells == OBJECT0 + self.target[:, None])).any(1)

        obs = self._obs
        obs.fill(0.0)
        oc = geom.obs_cells
        vis_o, cells_o = vis[:, oc], cells[:, oc]  # (N, P)
        n_cells = oc.size
        # Splitting the contiguous last axis makes a view, so these writes land in obs.
        view = obs[:, self.obs_slices["view"]].reshape(self.num_envs, n_cells, self._cat0 + k)
        view[:, :, 0] = vis_o
        view[:, :, 1] = vis_o & (cells_o == WALL)
        env_i, cell_i = np.nonzero(vis_o & (cells_o >= OBJECT0))
        category = cells_o[env_i, cell_i].astype(np.int64) - OBJECT0
        view[env_i, cell_i, self._cat0 + category] = 1.0
        if self._cat0 == 3:
            view[:, :, 2] = vis_o & (cells_o == OBJECT0 + self.target[:, None])

        obs[rows, self.obs_slices["target"].start + self.target] = 1.0
        gps = obs[:, self.obs_slices["gps"]]
        dy, dx = np.divmod(self.pos, self.stride)
        sy, sx = np.divmod(self.start_pos, self.stride)
        fwd, right = DIRS[self.start_heading], DIRS[(self.start_heading + 1) % 4]
        gps[:, 0] = ((dy - sy) * fwd[:, 0] + (dx - sx) * fwd[:, 1]) / self.cfg.grid_size
        gps[:, 1] = ((dy - sy) * right[:, 0] + (dx - sx) * right[:, 1]) / self.cfg.grid_size
        rel = (self.heading - self.start_heading) % 4
        gps[:, 2] = _SIN[rel]
        gps[:, 3] = _COS[rel]
        has_prev = self.prev_action >= 0
        obs[rows[has_prev], self.obs_slices["prev_action"].start + self.prev_action[has_prev]] = 1.0
        obs[:, self.obs_slices["prev_reward"].start] = self.prev_reward
        obs[:, self.obs_slices["episode_start"].start] = self.episode_start

    # ---- helpers for tests, renderers and scripted agents --------------------------------------

    def positions(self) -> np.ndarray:
        """(N, 2) (row, column) of each agent in map coordinates (without the padding)."""
        y, x = np.divmod(self.pos, self.stride)
        return np.stack([y, x], axis=1) - self.cfg.view_radius

    def oracle_actions(self) -> np.ndarray:
        """(N,) actions of an agent that knows the map: shortest path, then STOP facing the target.

        Its inner episodes succeed with SPL 1 (path length = shortest-path distance).
        """
        cells = self.stride * self.stride
        base = self.target * cells
        here = self._dist[self._rows, base + self.pos]
        ahead_cell = self.pos + self._moves[self.heading]
        ahead = np.where(
            self._grid[self._rows, ahead_cell] == 0,
            self._dist[self._rows, base + ahead_cell],
            UNREACHABLE,
        )
        right_cell = self.pos + self._moves[(self.heading + 1) % 4]
        right = np.where(
            self._grid[self._rows, right_cell] == 0,
            self._dist[self._rows, base + right_cell],
            UNREACHABLE,
        )
        actions = np.full(self.num_envs, TURN_LEFT, dtype=np.int64)
        actions[(right < here) | ((here == 0) & ~self.target_in_reach)] = TURN_RIGHT
        actions[(here > 0) & (ahead < here)] = FORWARD
        actions[self.target_in_reach] = STOP
        return actions


_SIN = np.sin(np.arange(4) * np.pi / 2).astype(np.float32)
_COS = np.cos(np.arange(4) * np.pi / 2).astype(np.float32)
