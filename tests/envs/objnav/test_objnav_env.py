"""ObjNavEnv (memrl/ObjNav-v0): the gymnasium API, trial/inner-episode info, rendering, bench."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env
from PIL import Image

from memrl.envs import make_env
from memrl.envs.objnav import ObjNavEnv
from memrl.envs.objnav.render import record_episode


def test_registered_env_passes_gymnasium_checker():
    env = make_env("memrl/ObjNav-v0", {"seed": 0, "trial_len": 64})
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert env.action_space.n == 4
    assert set(info) >= {"inner_episode", "inner_episode_step", "target", "distance"}


def test_unknown_config_key_names_the_allowed_ones():
    with pytest.raises(ValueError, match="Allowed: .*grid_size"):
        make_env("memrl/ObjNav-v0", {"grid": 20})


def test_inner_episodes_and_trial_metrics_in_info():
    env = ObjNavEnv(seed=1, trial_len=300)
    env.reset()
    successes, dones, returns = 0, 0, []
    ep_return = 0.0
    for t in range(300):
        action = int(env.vec.oracle_actions()[0]) if t % 50 < 40 else 0
        obs, reward, terminated, truncated, info = env.step(action)
        ep_return += reward
        assert not terminated
        if info.get("inner_episode_done"):
            dones += 1
            successes += info["inner_episode_success"]
            assert info["inner_episode_return"] == pytest.approx(ep_return, abs=1e-4)
            assert 0.0 <= info["inner_episode_spl"] <= 1.0
            returns.append(ep_return)
            ep_return = 0.0
            if not truncated:  # the next inner episode starts at once, in the same trial
                assert obs[env.obs_slices["episode_start"]][0] == 1.0
        assert truncated == (t == 299)
    assert info["trial_episodes"] == dones > 2
    assert info["trial_success_rate"] == pytest.approx(successes / dones)
    assert 0 < successes < dones  # the forced early STOPs fail, the oracle's succeed
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset()
    with pytest.raises(ValueError, match="action"):
        env.step(4)


def test_same_seed_same_trial():
    a, b = ObjNavEnv(), ObjNavEnv()
    oa, _ = a.reset(seed=7)
    ob, _ = b.reset(seed=7)
    assert np.array_equal(oa, ob)
    for action in [1, 1, 2, 1, 3, 0, 1]:
        assert np.array_equal(a.step(action)[0], b.step(action)[0])
    oc, _ = b.reset(seed=8)
    assert not np.array_equal(oa, oc)


def test_render_and_episode_png_gif(tmp_path):
    env = ObjNavEnv(render_mode="rgb_array", seed=2, cell_px=8)
    env.reset()
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    assert frame.shape[1] == 24 * 8
    result = record_episode(env, tmp_path / "episode", policy="oracle", max_steps=200)
    assert result["success"] and result["spl"] == pytest.approx(1.0)
    png = Image.open(result["png"])
    assert png.size == (frame.shape[1], frame.shape[0])
    gif = Image.open(result["gif"])
    assert gif.n_frames == result["steps"] >= 2
    with pytest.raises(ValueError, match="rgb_array"):
        record_episode(ObjNavEnv(), tmp_path / "x")
    assert ObjNavEnv().render() is None


def test_bench_writes_table_parquet_png(tmp_path, capsys):
    from memrl.bench import objnav as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(
        ["--batch-sizes", "1,8", "--seconds", "0.2", "--trial-len", "64", "--output", str(tmp_path)]
    )
    assert bench.run(args) == 0
    frame = pd.read_parquet(tmp_path / "objnav.parquet")
    assert list(frame["mode"]) == ["vec", "vec", "gym", "worker"]
    assert list(frame["batch"]) == [1, 8, 1, 1]
    assert (frame["env_steps_per_s"] > 0).all()
    assert (tmp_path / "objnav.png").stat().st_size > 0
    assert "env_steps_per_s" in capsys.readouterr().out
