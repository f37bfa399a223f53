"""The native vector Dark-Key-To-Door env against gymnasium's SyncVectorEnv of single envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from memrl.envs.key_door import DarkKeyToDoorEnv, DarkKeyToDoorVectorEnv

INNER_KEYS = (
    "inner_episode",
    "inner_episode_step",
    "inner_episode_done",
    "inner_episode_return",
    "inner_episode_success",
)


def _sync(num_envs: int, **kwargs):
    return gym.vector.SyncVectorEnv(
        [lambda: DarkKeyToDoorEnv(**kwargs) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(size=3, episode_len=6, trial_len=20),
        dict(size=4, episode_len=5, trial_len=13, dark=False),
        dict(size=2, episode_len=3, trial_len=7, in_context_inputs=False),
        dict(size=3, episode_len=4, trial_len=11, trial_end="terminate"),
    ],
)
def test_same_trajectories_as_sync_vector_env(kwargs):
    n, steps = 12, 400
    ref, vec = _sync(n, **kwargs), DarkKeyToDoorVectorEnv(n, **kwargs)
    assert vec.single_observation_space == ref.single_observation_space
    assert vec.single_action_space == ref.single_action_space
    o_ref, _ = ref.reset(seed=7)
    o_vec, _ = vec.reset(seed=7)
    np.testing.assert_array_equal(o_vec, o_ref)
    rng = np.random.default_rng(0)
    successes = resets = 0
    for _ in range(steps):
        actions = rng.integers(0, 5, size=n)
        r_ref, r_vec = ref.step(actions), vec.step(actions)
        for a, b in zip(r_ref[:4], r_vec[:4], strict=True):
            np.testing.assert_array_equal(b, a)
        info_ref, info_vec = r_ref[4], r_vec[4]
        done = info_ref.get("inner_episode_done", np.zeros(n, bool)) & info_ref.get(
            "_inner_episode_done", np.zeros(n, bool)
        )
        mask = info_vec.get("_inner_episode_done", np.zeros(n, bool))
        np.testing.assert_array_equal(mask, done)
        for key in INNER_KEYS:
            if done.any():
                np.testing.assert_array_equal(info_vec[key][done], info_ref[key][done])
        successes += int(info_vec.get("inner_episode_success", np.zeros(n))[done].sum())
        resets += int((r_vec[2] | r_vec[3]).sum())
    # The sequence exercised what matters: key/door rewards, successes and trial ends.
    assert successes > 0 and resets > 0


def test_bad_actions_and_seeds_are_clear_errors():
    vec = DarkKeyToDoorVectorEnv(3, size=3, episode_len=4, trial_len=8)
    with pytest.raises(RuntimeError, match="before reset"):
        vec.step(np.zeros(3, np.int64))
    vec.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        vec.step(np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"ints in \[0, 5\)"):
        vec.step(np.array([0, 5, 1]))
    with pytest.raises(ValueError, match="2 seeds for 3 envs"):
        vec.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
        DarkKeyToDoorVectorEnv(0)
    with pytest.raises(ValueError, match="size must be an int >= 2"):
        DarkKeyToDoorVectorEnv(2, size=1)


def test_observations_are_fresh_arrays():
    """RLlib keeps every row it is given: a step must not overwrite earlier observations."""
    vec = DarkKeyToDoorVectorEnv(4, size=3, episode_len=4, trial_len=8)
    first, _ = vec.reset(seed=1)
    kept = first.copy()
    for _ in range(5):
        vec.step(np.full(4, 4))
    np.testing.assert_array_equal(first, kept)


def test_arrays_handed_out_are_not_the_envs_state():
    """The core replaces its state arrays rather than writing into them, so an inner episode's
    info arrays are not copied and must keep their values under later steps; and what a caller
    does to the arrays it got does not change the env."""
    vec = DarkKeyToDoorVectorEnv(4, size=3, episode_len=3, trial_len=7)
    ref = DarkKeyToDoorVectorEnv(4, size=3, episode_len=3, trial_len=7)
    vec.reset(seed=2)
    ref.reset(seed=2)
    kept = []
    for step in range(30):
        actions = np.full(4, step % 5)
        obs, reward, terminated, truncated, infos = vec.step(actions)
        expected = ref.step(actions)
        for a, b in zip((obs, reward, terminated, truncated), expected[:4], strict=True):
            np.testing.assert_array_equal(a, b)
        if infos:
            kept.append((infos, {k: np.copy(v) for k, v in infos.items()}))
        for array in (obs, reward, terminated, truncated):
            array[...] = 1
    assert len(kept) >= 5
    for infos, copies in kept:
        for key, value in infos.items():
            np.testing.assert_array_equal(value, copies[key])
