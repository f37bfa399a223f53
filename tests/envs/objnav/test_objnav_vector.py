"""ObjNavVectorEnv: the scalar env's trajectories per env, NEXT_STEP autoreset, vector infos."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from memrl_testing import TINY_MEMO

from memrl.envs.objnav import ObjNavEnv, ObjNavVectorEnv

CONFIG = {"grid_size": 10, "rooms": 2, "num_categories": 3, "episode_len": 8, "trial_len": 25}


def test_envs_follow_the_scalar_env_seeded_seed_plus_i():
    n, seed = 3, 11
    vec = ObjNavVectorEnv(n, **CONFIG)
    assert vec.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    singles = [ObjNavEnv(**CONFIG) for _ in range(n)]
    obs, _ = vec.reset(seed=seed)
    want = [s.reset(seed=seed + i)[0] for i, s in enumerate(singles)]
    np.testing.assert_array_equal(obs, np.stack(want))
    rng = np.random.default_rng(0)
    needs_reset = [False] * n
    seen = {"inner": 0, "trials": 0, "resets": 0}
    for _ in range(80):  # > 3 trials of 25 steps: several autoresets per env
        actions = rng.integers(0, 4, n)
        obs, reward, terminated, truncated, infos = vec.step(actions)
        assert not terminated.any()
        for i, single in enumerate(singles):
            if needs_reset[i]:
                o, _ = single.reset()  # the scalar env's next trial (its generators go on)
                r, trunc, info = 0.0, False, {}
                seen["resets"] += 1
            else:
                o, r, _, trunc, info = single.step(int(actions[i]))
            np.testing.assert_array_equal(obs[i], o)
            assert reward[i] == np.float32(r) and truncated[i] == trunc
            done = bool(info.get("inner_episode_done"))
            assert bool(infos.get("_inner_episode_done", np.zeros(n, bool))[i]) == done
            if done:
                seen["inner"] += 1
                for key in ("inner_episode", "inner_episode_success", "inner_episode_length"):
                    assert infos[key][i] == info[key], key
                assert infos["inner_episode_return"][i] == pytest.approx(
                    info["inner_episode_return"], abs=1e-5
                )
            if trunc:
                seen["trials"] += 1
                assert infos["trial_episodes"][i] == info["trial_episodes"]
                assert infos["trial_spl"][i] == pytest.approx(info["trial_spl"])
            needs_reset[i] = trunc
    assert seen["inner"] > 10 and seen["trials"] >= 6 and seen["resets"] >= 6


def test_config_seed_and_bad_input():
    a = ObjNavVectorEnv(2, seed=5, **CONFIG)
    b = ObjNavEnv(seed=6, **CONFIG)
    np.testing.assert_array_equal(a.reset()[0][1], b.reset()[0])
    assert a.single_observation_space.shape == (a.vec.obs_dim,) and a.trial_len == 25
    with pytest.raises(ValueError, match="num_envs"):
        ObjNavVectorEnv(0, **CONFIG)
    with pytest.raises(ValueError, match="2 seeds for 3 envs"):
        ObjNavVectorEnv(3, **CONFIG).reset(seed=[1, 2])
    with pytest.raises(ValueError, match="shape \\(2,\\)"):
        a.step(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="grid_sise"):
        ObjNavVectorEnv(2, grid_sise=9)


@pytest.mark.slow
def test_memo_trains_on_the_vector_env_through_rllib(monkeypatch):
    import ray

    import memrl.envs
    from memrl.experiment.build import build_algorithm_config, gym_vectorize_mode
    from memrl.experiment.config import parse_config

    # The registry entry of memrl/envs/__init__.py, pinned here so the test checks this class.
    monkeypatch.setitem(
        memrl.envs.VECTOR_ENTRY_POINTS, "memrl/ObjNav-v0", "memrl.envs.objnav:ObjNavVectorEnv"
    )
    exp = parse_config(
        {
            "env": {"id": "memrl/ObjNav-v0", "config": {**CONFIG, "trial_len": 40}},
            "algorithm": {"name": "ppo", "train_batch_size": 60, "minibatch_size": 30},
            "model": {**TINY_MEMO, "partial_update_steps": 20},
            "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 3},
        }
    )
    assert gym_vectorize_mode(exp) == "vector_entry_point"
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        algo = build_algorithm_config(exp).build_algo()
        assert isinstance(algo.env_runner.env.unwrapped, ObjNavVectorEnv)
        # 100 steps per env: trials of 40 end and restart (NEXT_STEP) inside the chunks.
        results = [algo.train() for _ in range(5)]
        algo.stop()
    finally:
        ray.shutdown()
    runners = [r["env_runners"] for r in results]
    assert runners[-1]["num_episodes_lifetime"] == 6  # 2 whole trials per env
    lengths = [r["episode_len_mean"] for r in runners if r.get("num_episodes", 0) > 0]
    assert lengths and all(x == 40 for x in lengths)
    # InnerEpisodeMetrics reads the vector infos.
    assert any(r.get("inner_episodes", 0) > 0 for r in runners)
    assert np.isfinite(results[-1]["learners"]["default_policy"]["total_loss"])
