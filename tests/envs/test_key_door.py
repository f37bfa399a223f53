"""Dark-Key-To-Door dynamics, exactly as in the Memo paper (docs/key_door.md)."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.envs import make_env
from memrl.envs.key_door import DarkKeyToDoorEnv, cell_of, moved

NOOP, UP, DOWN, LEFT, RIGHT = range(5)


def place(env: DarkKeyToDoorEnv, start, key, door) -> None:
    """Puts a fresh trial's layout where the test wants it (hidden state of the env)."""
    core = env.core
    core.start, core.key, core.door = (cell_of(pos, env.size) for pos in (start, key, door))
    core.soft_reset(True)


def walk(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a))
    return out


def test_registered_and_spaces():
    env = make_env("memrl/DarkKeyToDoor-v0").unwrapped
    assert isinstance(env, DarkKeyToDoorEnv)
    assert (env.size, env.episode_len, env.trial_len, env.dark) == (9, 50, 500, True)
    obs, info = env.reset(seed=0)
    assert obs.shape == (4 + 5 + 2,) and env.observation_space.contains(obs)
    assert env.action_space.n == 5
    assert info == {"inner_episode": 0, "inner_episode_step": 0}


def test_moves_are_clipped_at_walls():
    env = DarkKeyToDoorEnv(size=5)
    env.reset(seed=0)
    place(env, (0, 0), (4, 4), (3, 4))
    walk(env, [LEFT, DOWN])
    assert env.agent_pos == (0, 0)
    walk(env, [RIGHT] * 7 + [UP] * 7)
    assert env.agent_pos == (4, 4)


def test_dark_observation_hides_key_and_door_and_reports_position():
    env = DarkKeyToDoorEnv(size=5, in_context_inputs=False)
    env.reset(seed=1)
    place(env, (1, 2), (3, 3), (0, 4))
    obs, *_ = env.step(RIGHT)
    np.testing.assert_allclose(obs, [2 / 5, 2 / 5, 0.0, 1 / 50], rtol=1e-6)
    # The same position with another key/door gives the same observation: they are hidden.
    env.reset(seed=2)
    place(env, (1, 2), (0, 0), (4, 4))
    obs2, *_ = env.step(RIGHT)
    np.testing.assert_array_equal(obs, obs2)
    lit = DarkKeyToDoorEnv(size=5, dark=False, in_context_inputs=False)
    lit.reset(seed=1)
    place(lit, (1, 2), (3, 3), (0, 4))
    obs3, *_ = lit.step(RIGHT)
    np.testing.assert_allclose(obs3[4:], [3 / 5, 3 / 5, 0.0, 4 / 5], rtol=1e-6)


def test_in_context_inputs_carry_previous_action_reward_and_start_flag():
    env = DarkKeyToDoorEnv(size=5)
    obs, _ = env.reset(seed=0)
    assert obs[4:9].sum() == 0 and obs[9] == 0 and obs[10] == 1.0
    place(env, (0, 0), (1, 0), (4, 4))
    obs, r, *_ = env.step(RIGHT)
    assert r == 1.0
    assert obs[4 + RIGHT] == 1.0 and obs[4:9].sum() == 1.0 and obs[9] == 1.0 and obs[10] == 0.0


def test_key_then_door_rewards_and_soft_reset_keeps_layout():
    env = DarkKeyToDoorEnv(size=5, episode_len=20, trial_len=100)
    env.reset(seed=3)
    place(env, (0, 0), (2, 0), (2, 2))
    # Reaching the door without the key gives nothing.
    results = walk(env, [UP, UP, RIGHT, RIGHT])
    assert [r for _, r, *_ in results] == [0.0, 0.0, 0.0, 0.0]
    assert env.agent_pos == (2, 2) and not env.has_key
    results = walk(env, [DOWN, DOWN])
    assert results[-1][1] == 1.0 and env.has_key
    # A second visit to the key cell gives nothing more.
    results = walk(env, [LEFT, RIGHT])
    assert [r for _, r, *_ in results] == [0.0, 0.0]
    obs, r, terminated, truncated, info = walk(env, [UP, UP])[-1]
    assert r == 1.0 and not terminated and not truncated
    assert info["inner_episode_done"] and info["inner_episode_success"]
    assert info["inner_episode_return"] == 2.0
    # Soft reset: back at the start, key gone, same layout, next inner episode.
    assert env.agent_pos == (0, 0) and not env.has_key
    assert (env.key_pos, env.door_pos) == ((2, 0), (2, 2))
    assert obs[3] == 0.0 and obs[-1] == 1.0
    _, _, _, _, info = env.step(NOOP)
    assert info["inner_episode"] == 1 and info["inner_episode_step"] == 1


def test_inner_episode_truncates_at_episode_len_and_trial_ends_at_trial_len():
    env = DarkKeyToDoorEnv(size=5, episode_len=20, trial_len=100)
    env.reset(seed=4)
    place(env, (0, 0), (4, 4), (4, 3))
    boundaries, last = [], None
    for t in range(1, 101):
        last = env.step(NOOP)
        if last[4].get("inner_episode_done"):
            boundaries.append(t)
            assert not last[4]["inner_episode_success"] and last[4]["inner_episode_return"] == 0
        if t < 100:
            assert not last[2] and not last[3]
    assert boundaries == [20, 40, 60, 80, 100]
    assert last[3] is True and last[2] is False  # the trial ends on time: truncated
    # ... or terminated, when its end is the end of all return
    env = DarkKeyToDoorEnv(size=5, episode_len=20, trial_len=30, trial_end="terminate")
    env.reset(seed=4)
    ends = [env.step(NOOP)[2:4] for _ in range(30)]
    assert ends[-1] == (True, False) and all(e == (False, False) for e in ends[:-1])
    with pytest.raises(ValueError, match="trial_end must be one of"):
        DarkKeyToDoorEnv(trial_end="stop")


def test_new_trial_redraws_layout_and_seed_reproduces_it():
    env = DarkKeyToDoorEnv(size=9)
    layouts = set()
    for seed in range(20):
        env.reset(seed=seed)
        layouts.add((env.start_pos, env.key_pos, env.door_pos))
    assert len(layouts) > 15
    env.reset(seed=7)
    first = (env.start_pos, env.key_pos, env.door_pos)
    env.reset(seed=7)
    assert (env.start_pos, env.key_pos, env.door_pos) == first


def test_single_env_steps_on_plain_python_values():
    """The single env runs the rules on Python scalars, not on length-1 arrays (those made every
    step 3-4x slower, issue 51), and hands out plain Python values."""
    env = DarkKeyToDoorEnv(size=3, episode_len=4, trial_len=9)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 5, size=60)
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.dtype == np.float32 and obs.shape == env.observation_space.shape
        assert type(reward) is float and type(terminated) is bool and type(truncated) is bool
        assert type(info["inner_episode"]) is int and type(info["inner_episode_step"]) is int
        if info.get("inner_episode_done"):
            assert type(info["inner_episode_return"]) is float
            assert type(info["inner_episode_success"]) is bool
        core = env.core
        state = (core.pos, core.start, core.key, core.door, core.t, core.trial_t, core.inner)
        assert all(type(v) is int for v in state) and type(core.has_key) is bool
        if terminated or truncated:
            env.reset()


def test_moved_is_where_the_env_goes():
    """``moved`` (used by the scripted agents and replays) follows the env's movement rule."""
    env = DarkKeyToDoorEnv(size=4, episode_len=50, trial_len=500)
    env.reset(seed=5)
    checked = 0
    for action in np.random.default_rng(1).integers(0, 5, size=400).tolist():
        before = env.agent_pos
        info = env.step(action)[4]
        if not info.get("inner_episode_done"):  # else the agent is back at the start
            assert env.agent_pos == moved(before, action, env.size)
            checked += 1
    assert checked > 300


@pytest.mark.parametrize("kwargs", [{"size": 1}, {"episode_len": 0}, {"trial_len": "10"}])
def test_bad_constructor_arguments_are_clear_errors(kwargs):
    with pytest.raises(ValueError, match="must be an int"):
        DarkKeyToDoorEnv(**kwargs)


def test_unknown_env_kwarg_names_the_problem():
    with pytest.raises(ValueError, match="env.config does not fit memrl/DarkKeyToDoor-v0"):
        make_env("memrl/DarkKeyToDoor-v0", {"sise": 5})
    with pytest.raises(ValueError, match="Unknown env 'memrl/Nope-v0'. Available"):
        make_env("memrl/Nope-v0")
