"""The native vector memory corridor against gymnasium's SyncVectorEnv of single corridors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from memrl.envs.corridor import MemoryCorridorEnv
from memrl.envs.corridor_vector import MemoryCorridorVectorEnv

INNER_KEYS = (
    "inner_episode",
    "inner_episode_step",
    "inner_episode_done",
    "inner_episode_return",
    "inner_episode_success",
)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(length=3, episodes_per_trial=1),
        dict(length=0, episodes_per_trial=3),
        dict(length=5, episodes_per_trial=2),
    ],
)
def test_same_trajectories_as_sync_vector_env(kwargs):
    n, steps = 9, 300
    ref = gym.vector.SyncVectorEnv(
        [lambda: MemoryCorridorEnv(**kwargs) for _ in range(n)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )
    vec = MemoryCorridorVectorEnv(n, **kwargs)
    assert vec.single_observation_space == ref.single_observation_space
    o_ref, _ = ref.reset(seed=11)
    o_vec, _ = vec.reset(seed=11)
    np.testing.assert_array_equal(o_vec, o_ref)
    rng = np.random.default_rng(0)
    ends = successes = 0
    for _ in range(steps):
        actions = rng.integers(0, 2, size=n)
        r_ref, r_vec = ref.step(actions), vec.step(actions)
        for a, b in zip(r_ref[:4], r_vec[:4], strict=True):
            np.testing.assert_array_equal(b, a)
        info_ref, info_vec = r_ref[4], r_vec[4]
        done = info_ref.get("inner_episode_done", np.zeros(n, bool)) & info_ref.get(
            "_inner_episode_done", np.zeros(n, bool)
        )
        np.testing.assert_array_equal(info_vec.get("_inner_episode_done", np.zeros(n, bool)), done)
        for key in INNER_KEYS:
            if done.any():
                np.testing.assert_array_equal(info_vec[key][done], info_ref[key][done])
        successes += int(info_vec.get("inner_episode_success", np.zeros(n))[done].sum())
        ends += int(r_vec[2].sum())
    assert successes > 0 and ends > 0


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
        MemoryCorridorVectorEnv(0)
    with pytest.raises(ValueError, match="length must be an int >= 0"):
        MemoryCorridorVectorEnv(2, length=-1)
    vec = MemoryCorridorVectorEnv(2, length=2)
    with pytest.raises(RuntimeError, match="before reset"):
        vec.step(np.zeros(2, np.int64))
