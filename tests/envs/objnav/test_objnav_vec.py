"""The batched ObjNav-lite core: observations, dynamics, rewards, inner episodes, trials."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.envs.objnav import ObjNavConfig, ObjNavVec
from memrl.envs.objnav.core import FORWARD, TURN_LEFT, TURN_RIGHT
from memrl.envs.objnav.view import OBJECT0, WALL


def _vec(n=8, **kw) -> ObjNavVec:
    vec = ObjNavVec(n, ObjNavConfig(seed=kw.pop("seed", 0), **kw))
    vec.reset()
    return vec


def test_observation_layout_at_trial_start():
    vec = _vec(4)
    k = vec.cfg.num_categories
    obs = vec._obs
    s = vec.obs_slices
    assert obs.shape == (4, vec.obs_dim) and obs.dtype == np.float32
    assert vec.obs_dim == 4 * 9 * (2 + k) + k + 4 + 4 + 1 + 1
    target = obs[:, s["target"]]
    assert np.array_equal(target.argmax(1), vec.target) and (target.sum(1) == 1).all()
    assert np.allclose(obs[:, s["gps"]], [[0, 0, 0, 1]] * 4)  # at the start pose
    assert (obs[:, s["prev_action"]] == 0).all()
    assert (obs[:, s["episode_start"]] == 1).all()


@pytest.mark.parametrize("target_channel", [False, True])
def test_view_channels_match_the_map(target_channel):
    vec = _vec(16, seed=3, target_channel=target_channel)
    k = vec.cfg.num_categories
    cat0 = 3 if target_channel else 2
    assert vec.view_shape == (4, 9, cat0 + k)
    assert vec.obs_dim == 4 * 9 * (cat0 + k) + k + 4 + 4 + 1 + 1
    low, high = vec.obs_bounds()
    rng = np.random.default_rng(0)
    targets_seen = 0
    for _ in range(30):
        vec.step(rng.integers(0, 4, 16))
        assert ((vec._obs >= low) & (vec._obs <= high)).all()
        view = vec._obs[:, vec.obs_slices["view"]].reshape(16, -1, cat0 + k)
        for i in range(16):
            world = vec.pos[i] + vec.geom.offsets[vec.heading[i]][vec.geom.obs_cells]
            codes = vec._grid[i, world]
            seen = vec.visible[i, vec.geom.obs_cells]
            assert np.array_equal(view[i, :, 0] == 1, seen)
            assert np.array_equal(view[i, :, 1] == 1, seen & (codes == WALL))
            for p in np.flatnonzero(seen & (codes >= OBJECT0)):
                assert view[i, p, cat0 + codes[p] - OBJECT0] == 1
            assert view[i, ~seen].sum() == 0
            assert view[i, :, cat0:].sum() == (seen & (codes >= OBJECT0)).sum()
            if target_channel:
                # The target channel marks exactly the seen cells that hold the target category.
                is_target = seen & (codes == OBJECT0 + vec.target[i])
                assert np.array_equal(view[i, :, 2] == 1, is_target)
                targets_seen += is_target.sum()
    if target_channel:
        assert targets_seen > 0


def test_target_channel_must_be_a_bool():
    with pytest.raises(ValueError, match="target_channel must be true or false"):
        ObjNavConfig(target_channel=1)


def test_forward_turns_walls_and_gps():
    vec = _vec(1, seed=4)
    start = vec.positions()[0].copy()
    vec.step(np.array([TURN_RIGHT]))
    gps = vec._obs[0, vec.obs_slices["gps"]]
    assert np.allclose(gps, [0, 0, 1, 0], atol=1e-6)  # sin 90 deg, cos 90 deg
    vec.step(np.array([TURN_LEFT]))
    moved = 0
    for _ in range(30):  # walk ahead until a wall or object stops the agent
        before = vec.positions()[0].copy()
        vec.step(np.array([FORWARD]))
        if np.array_equal(before, vec.positions()[0]):
            break
        moved += 1
    assert moved >= 1
    gps = vec._obs[0, vec.obs_slices["gps"]]
    assert gps[0] == pytest.approx(moved / vec.cfg.grid_size) and gps[1] == 0
    ahead = vec.pos[0] + vec._moves[vec.heading[0]]
    assert vec._grid[0, ahead] != 0  # blocked: the cell ahead is a wall or an object
    assert not np.array_equal(start, vec.positions()[0])


@pytest.mark.parametrize("shaping", ["trial_potential", "episode_refund", "episode"])
def test_oracle_succeeds_with_spl_one_and_rewards_add_up(shaping):
    vec = _vec(8, seed=1, shaping=shaping)
    cfg = vec.cfg
    episodes = 0
    for _ in range(600):
        before = vec.dist.copy()
        actions = vec.oracle_actions()
        r = vec.step(actions)
        # Reward = success bonus - step cost + decrease in distance (distance read before restart)
        # + with trial_potential, the potential's move to the next start and target.
        moved = actions == FORWARD
        expected = np.where(moved, cfg.distance_reward_scale, 0.0) - cfg.step_cost
        expected += np.where(r.success, cfg.success_reward, 0.0)
        if shaping == "trial_potential":
            restarted = r.episode_done & ~r.trial_done
            end = before - moved  # the oracle's forward steps each shorten the path by one
            expected += np.where(restarted, cfg.distance_reward_scale * (end - vec.dist), 0.0)
        assert np.allclose(r.reward, expected, atol=1e-5)
        assert (before[moved] > 0).all()
        done = r.episode_done
        assert np.array_equal(done, r.success)  # the oracle never times out or stops wrongly
        assert np.allclose(r.spl[done], 1.0)
        episodes += done.sum()
    assert episodes > 50


@pytest.mark.parametrize("shaping", ["trial_potential", "episode_refund"])
def test_stop_out_of_reach_fails_and_starts_next_episode(shaping):
    vec = _vec(4, seed=2, shaping=shaping)
    assert not vec.target_in_reach.any()  # starts keep min_start_distance >= 2 from goal cells
    index = vec.episode_index.copy()
    before = vec.dist.copy()
    r = vec.step(np.zeros(4, dtype=np.int64))
    assert r.episode_done.all() and not r.success.any()
    cfg = vec.cfg
    # trial_potential: the potential's move to the next start and target is paid; episode_refund:
    # nothing (the failed episode had not moved, so there is nothing to pay back).
    jump = cfg.distance_reward_scale * (before - vec.dist) if shaping == "trial_potential" else 0
    assert np.allclose(r.reward, -cfg.step_cost - cfg.failed_stop_penalty + jump, atol=1e-6)
    assert (r.spl == 0).all() and (r.episode_length == 1).all()
    assert np.array_equal(vec.episode_index, index + 1)
    assert (vec._obs[:, vec.obs_slices["episode_start"]] == 1).all()
    assert (vec.dist >= vec.cfg.min_start_distance).all()


@pytest.mark.parametrize("shaping", ["trial_potential", "episode_refund", "episode"])
def test_a_failed_stop_that_does_not_end_the_episode_only_costs_the_penalty(shaping):
    vec = _vec(8, seed=14, shaping=shaping, failed_stop_ends=False, episode_len=40)
    cfg = vec.cfg
    rng = np.random.default_rng(6)
    failed_stops = successes = 0
    for _ in range(300):
        pose = (vec.pos.copy(), vec.heading.copy(), vec.target.copy(), vec.start_dist.copy())
        index, t_episode, before = vec.episode_index.copy(), vec.t_episode.copy(), vec.dist.copy()
        actions = np.where(rng.random(8) < 0.6, vec.oracle_actions(), rng.integers(0, 4, 8))
        actions[rng.random(8) < 0.2] = 0  # STOPs wherever the agent stands
        r = vec.step(actions)
        failed = (actions == 0) & ~r.success
        limit = t_episode + 1 >= cfg.episode_len
        # The inner episode ends on a success or the step limit, never on a failed STOP.
        assert np.array_equal(r.episode_done, r.success | limit)
        on = failed & ~limit & ~r.trial_done
        # Same start, place, heading and target; the episode's clock runs on.
        now = (vec.pos, vec.heading, vec.target, vec.start_dist)
        for after, before_ in zip(now, pose, strict=True):
            assert np.array_equal(after[on], before_[on])
        assert np.array_equal(vec.episode_index[on], index[on])
        assert np.array_equal(vec.t_episode[on], t_episode[on] + 1)
        # The penalty and the step cost, nothing else: STOP does not move, nothing is refunded.
        np.testing.assert_allclose(r.reward[on], -cfg.step_cost - cfg.failed_stop_penalty)
        assert np.array_equal(vec.dist[on], before[on])
        failed_stops += on.sum()
        successes += r.success.sum()
    assert failed_stops > 50 and successes > 20, (failed_stops, successes)
    with pytest.raises(ValueError, match="failed_stop_ends must be true or false"):
        ObjNavConfig(failed_stop_ends="no")


def test_episode_step_limit_and_trial_end_with_autoreset():
    vec = _vec(3, seed=6, episode_len=7, trial_len=30)
    grids = vec._grid.copy()
    for t in range(1, 31):
        r = vec.step(np.full(3, TURN_LEFT))
        assert (r.episode_done == (t % 7 == 0)).all()
        assert (r.trial_done == (t == 30)).all()
        if t < 30:
            assert np.array_equal(vec._grid, grids)  # one layout for the whole trial
    assert not np.array_equal(vec._grid, grids)  # the next trial has new layouts
    assert (vec.t_trial == 0).all() and (vec.episode_index == 0).all()
    assert (vec._obs[:, vec.obs_slices["gps"]][:, :2] == 0).all()


def test_same_seed_same_rollout_and_vector_rows_are_independent_envs():
    a, b = _vec(5, seed=11), _vec(5, seed=11)
    rng = np.random.default_rng(1)
    for _ in range(100):
        acts = rng.integers(0, 4, 5)
        ra, rb = a.step(acts), b.step(acts)
        assert np.array_equal(ra.obs, rb.obs) and np.array_equal(ra.reward, rb.reward)
    layouts = {a.layouts[i].grid.tobytes() for i in range(5)}
    assert len(layouts) == 5


@pytest.mark.parametrize(
    "bad", [np.array([0, 4]), np.array([-1, 0]), np.array([0.5, 1.0]), np.array([0, 1, 2])]
)
def test_step_rejects_bad_actions(bad):
    vec = _vec(2)
    with pytest.raises(ValueError, match="ObjNav"):
        vec.step(bad)


def test_num_envs_is_checked():
    with pytest.raises(ValueError, match="num_envs"):
        ObjNavVec(0)


def _trial_total(policy: str, shaping: str, trials_envs: int = 16, **kw) -> np.ndarray:
    """Return per trial (500 steps) of a scripted policy: ``still`` (turns in place), ``farm``
    (a step closer, then STOP: ~3 steps per inner episode) or ``oracle``."""
    vec = _vec(trials_envs, seed=5, trial_len=500, episode_len=100, shaping=shaping, **kw)
    total = np.zeros(trials_envs)
    for _ in range(500):
        if policy == "still":
            actions = np.full(trials_envs, TURN_LEFT)
        elif policy == "farm":
            actions = vec.oracle_actions()
            actions[vec.t_episode >= 2] = 0  # STOP after two oracle steps
        else:
            actions = vec.oracle_actions()
        total += vec.step(actions).reward
    return total


@pytest.mark.parametrize(
    "shaping, ends",
    [("trial_potential", True), ("episode_refund", True), ("episode_refund", False)],
)
def test_stop_farming_earns_less_than_standing_still(shaping, ends):
    still = _trial_total("still", shaping, failed_stop_ends=ends)
    farm = _trial_total("farm", shaping, failed_stop_ends=ends)
    assert farm.mean() < still.mean() - 5.0  # each failed STOP costs, and approaching pays nothing
    assert _trial_total("oracle", shaping, failed_stop_ends=ends).mean() > still.mean() + 20
    # The per-episode shaping it replaces is the farm the agents learnt:
    farm_ep = _trial_total("farm", "episode")
    still_ep = _trial_total("still", "episode")
    assert farm_ep.mean() > still_ep.mean() + 5.0


def test_trial_potential_telescopes_over_a_trial():
    vec = _vec(6, seed=9, trial_len=300, episode_len=40, shaping="trial_potential")
    cfg = vec.cfg
    start = vec.dist.astype(float).copy()
    rng = np.random.default_rng(2)
    total = np.zeros(6)
    successes = np.zeros(6)
    failed_stops = np.zeros(6)
    for _ in range(299):
        actions = np.where(rng.random(6) < 0.5, vec.oracle_actions(), rng.integers(0, 4, 6))
        r = vec.step(actions)
        total += r.reward
        successes += r.success
        failed_stops += (actions == 0) & ~r.success
    expected = (
        cfg.success_reward * successes
        - cfg.step_cost * 299
        - cfg.failed_stop_penalty * failed_stops
        + cfg.distance_reward_scale * (start - vec.dist)
    )
    np.testing.assert_allclose(total, expected, atol=1e-3)
    assert failed_stops.sum() > 0 and successes.sum() > 0


def test_episode_refund_pays_back_a_failed_stop_and_keeps_success_and_timeouts():
    vec = _vec(8, seed=12, shaping="episode_refund", episode_len=30)
    cfg = vec.cfg
    scale = cfg.distance_reward_scale
    rng = np.random.default_rng(4)
    seen = {"failed_stop": 0, "success": 0, "timeout": 0}
    for _ in range(400):
        start, before = vec.start_dist.copy(), vec.dist.copy()
        actions = np.where(rng.random(8) < 0.7, vec.oracle_actions(), rng.integers(0, 4, 8))
        r = vec.step(actions)
        stop = actions == 0
        failed = stop & ~r.success
        base = np.where(r.success, cfg.success_reward, 0.0) - cfg.step_cost
        base -= np.where(failed, cfg.failed_stop_penalty, 0.0)
        # Without a restart the distance reward is this step's decrease (rows that restarted
        # hold the next start's distance, so they are checked below from the reward).
        kept = ~r.episode_done
        np.testing.assert_allclose(
            r.reward[kept], (base + scale * (before - vec.dist))[kept], atol=1e-5
        )
        ended = r.episode_done & ~r.trial_done
        for i in np.flatnonzero(ended):
            moved_closer = r.reward[i] - base[i]  # the step's distance reward
            if failed[i]:
                # STOP does not move, and the episode's whole distance reward, scale * (start -
                # before), comes back.
                np.testing.assert_allclose(moved_closer, scale * (before[i] - start[i]), atol=1e-5)
                seen["failed_stop"] += 1
            else:
                # Success or the step limit: only this step's decrease (0 or +-1 cell).
                assert abs(moved_closer) <= scale + 1e-5
                seen["success" if r.success[i] else "timeout"] += 1
    assert min(seen.values()) > 0, seen


def test_reward_obs_task_shows_only_success_and_failed_stops():
    full = _vec(8, seed=13)
    task = _vec(8, seed=13, reward_obs="task")
    cfg = task.cfg
    low, high = task.obs_bounds()
    pr = task.obs_slices["prev_reward"].start
    rng = np.random.default_rng(5)
    kinds = {"success": 0, "failed_stop": 0, "moved": 0}
    for _ in range(300):
        actions = np.where(rng.random(8) < 0.7, full.oracle_actions(), rng.integers(0, 4, 8))
        rf, rt = full.step(actions), task.step(actions)
        # Same dynamics and rewards; only the observed previous reward differs.
        assert np.array_equal(rf.reward, rt.reward) and np.array_equal(rf.success, rt.success)
        failed = (actions == 0) & ~rt.success
        expected = np.where(rt.success, cfg.success_reward, 0.0)
        expected -= np.where(failed, cfg.failed_stop_penalty, 0.0)
        np.testing.assert_allclose(rt.obs[:, pr], expected, atol=1e-6)
        np.testing.assert_allclose(rf.obs[:, pr], rf.reward, atol=1e-6)
        others = np.ones(full.obs_dim, bool)
        others[pr] = False
        assert np.array_equal(rf.obs[:, others], rt.obs[:, others])
        assert ((rt.obs >= low) & (rt.obs <= high)).all()
        kinds["success"] += rt.success.sum()
        kinds["failed_stop"] += failed.sum()
        kinds["moved"] += (np.abs(rt.reward) > 0.1).sum()
    assert min(kinds.values()) > 0, kinds
    with pytest.raises(ValueError, match="reward_obs must be one of"):
        ObjNavConfig(reward_obs="distance")


@pytest.mark.parametrize("m", [1, 2, None])
def test_targets_per_trial_limits_each_trial_to_its_own_subset(m):
    n, k = 4, 6
    vec = _vec(
        n,
        seed=3,
        grid_size=12,
        rooms=4,
        num_categories=k,
        targets_per_trial=m,
        episode_len=2,
        trial_len=40,
    )
    seen: dict[tuple[int, int], set[int]] = {}
    trial = np.zeros(n, dtype=np.int64)
    for _ in range(40 * 6):
        for i in range(n):
            seen.setdefault((i, int(trial[i])), set()).add(int(vec.target[i]))
            assert vec.trial_targets[i, vec.target[i]]
        r = vec.step(np.full(n, TURN_LEFT))
        trial += r.trial_done
    assert len(seen) == n * 6
    sizes = {len(s) for s in seen.values()}
    if m is not None:
        # 20 inner episodes per trial: a trial meets every category it may draw from.
        assert sizes == {m}
        assert (vec.trial_targets.sum(axis=1) == m).all()
        # The subsets are drawn per env and per trial, not fixed.
        assert len({frozenset(s) for s in seen.values()}) > 3
    else:
        assert vec.trial_targets.all() and min(sizes) >= 4


@pytest.mark.parametrize("bad", [0, 7, True, 1.5, "1"])
def test_targets_per_trial_is_checked(bad):
    with pytest.raises(ValueError, match=r"targets_per_trial .*\[1, num_categories=6\]"):
        ObjNavConfig(grid_size=12, num_categories=6, targets_per_trial=bad)
