"""`memrl bench objnav-memo`: episode bookkeeping, cache figures, and a trained run end to end."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
import torch
from memrl_testing import TINY_MEMO

from memrl.bench import objnav_memo
from memrl.envs.objnav import ObjNavConfig, ObjNavVec
from memrl.methods.memo.rlmodule import MemoRLModule

torch.set_num_threads(1)

ENV = {"grid_size": 10, "rooms": 2, "num_categories": 3, "episode_len": 30, "trial_len": 48}


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    objnav_memo.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_episode_log_groups_by_index_and_start_time():
    log = objnav_memo.EpisodeLog(2)

    def ended(*envs, success=(), spl=0.5):
        done = np.zeros(2, bool)
        done[list(envs)] = True
        ok = np.zeros(2, bool)
        ok[list(success)] = True
        return SimpleNamespace(episode_done=done, success=ok, spl=np.full(2, spl) * ok)

    log.update(3, ended(0, 1, success=[0]))  # index 0 of both envs, started at t=0
    log.update(9, ended(0, success=[0]))  # env 0, index 1, started at t=4
    log.update(20, ended(0, 1))  # env 0 index 2 (from t=10), env 1 index 1 (from t=4)
    row = log.summary([0, 1, 2], train_len=5, late_start=10, trials=2)
    assert row["episodes_per_trial"] == 2.5
    assert row["SR ep0"] == 0.5 and row["SPL ep0"] == 0.25
    assert row["SR ep1"] == 0.5  # env 0's index 1 succeeded, env 1's did not
    assert row["SR ep2+"] == 0.0
    assert row["SR t<5"] == 0.5 and row["SR t>=10"] == 0.0
    assert row["SR all"] == 0.4
    groups = {r["group"] for r in objnav_memo.bucket_rows([{"variant": "x", **row}])}
    assert groups == {"ep0", "ep1", "ep2+", "t<5", "t>=10"}
    # An early cut of its own: the episodes that start before it (env 0's and env 1's index 0).
    early = log.summary([0], train_len=5, late_start=10, trials=2, early_end=1)
    assert early["SR t<1"] == 0.5 and early["SR t<5"] == 0.5 and early["SR t>=10"] == 0.0
    early = log.summary([0], train_len=5, late_start=10, trials=2, early_end=5)
    assert "SR t<5" in early and len([k for k in early if k.startswith("SR t<")]) == 1
    # Successes per 1000 late steps: one success (env 0's index 1) in 2 x (24 - 4) steps.
    late = log.summary([0], train_len=5, late_start=4, trials=2, trial_len=24)
    assert late["successes_per_1k t>=4"] == 25.0 and late["SR t>=4"] == round(1 / 3, 3)
    assert "successes_per_1k t>=10" not in row  # only with the evaluated trial length
    # Over trial time: starts 0, 0, 4, 4 (two wins) in [0, 8), 10 (a miss) in [8, 16), none later.
    bins = log.timeline(8, trial_len=24, trials=2)
    assert [(b["t"], b["episodes"], b["SR"], b["SPL"]) for b in bins] == [
        (0, 4, 0.5, 0.25),
        (8, 1, 0.0, 0.0),
        (16, 0, None, None),
    ]
    assert [b["successes_per_1k"] for b in bins] == [125.0, 0.0, 0.0]  # 2 wins in 2 x 8 steps
    # A last stretch cut by the trial's end counts its own steps: 1 win in 2 x 2 steps.
    bins = log.timeline(3, trial_len=5, trials=2)
    assert [(b["t"], b["episodes"], b["successes_per_1k"]) for b in bins] == [
        (0, 2, 166.67),
        (3, 2, 250.0),
    ]


def test_bad_buckets_and_variants():
    with pytest.raises(ValueError, match="start at 0"):
        objnav_memo.parse_buckets("1,5")
    with pytest.raises(ValueError, match="comma-separated"):
        objnav_memo.parse_buckets("0,a")
    with pytest.raises(ValueError, match="--time-bin must be >= 1 step, got 0"):
        objnav_memo.run(_args("--run", "no-such-run", "--time-bin", "0"))
    args = _args("--fct-window", "64", "--memo-cap", "4")
    assert objnav_memo.variants("fct", args) == [
        ("fct", {}, False),
        ("fct-window64", {"fct_window": 64}, False),
    ]
    assert objnav_memo.variants("memo", args)[1] == ("memo-stream4", {"max_summaries": 4}, False)
    assert objnav_memo.variants("rmt", args) == [("rmt", {}, False)]
    forget = _args("--forget", "--fct-window", "0")
    assert objnav_memo.variants("fct", forget) == [("fct", {}, False), ("fct-forget", {}, True)]
    assert objnav_memo.variants("mlp", forget) == [("mlp", {}, False)]  # nothing to clear


def _module(mode: str, **extra) -> MemoRLModule:
    vec = ObjNavVec(1, ObjNavConfig.from_kwargs({**ENV, "seed": 0}))
    low, high = vec.obs_bounds()
    torch.manual_seed(0)
    return MemoRLModule(
        observation_space=gym.spaces.Box(low, high, dtype=np.float32),
        action_space=gym.spaces.Discrete(4),
        model_config=dict(
            d_model=16, n_layers=1, n_heads=2, l_seg=8, l_sum=4, encoder_hiddens=[16], mode=mode
        )
        | extra,
    )


def test_forget_clears_the_context_at_every_inner_episode():
    args = _args("--trial-len", "48", "--trials", "1", "--late-start", "20")
    whole = _module("fct")
    objnav_memo.run_trials(whole, ENV, args)
    assert whole.net.cache_tokens(whole.keeper.cache) == 48  # FCT keeps every step of the trial
    forgetful = _module("fct")
    row = objnav_memo.run_trials(forgetful, ENV, args, forget=True)
    # An inner episode ends by step 30 (episode_len), so the context at the end holds only the
    # steps of the last one: at most 48 - 30.
    assert row["context_tokens"] == forgetful.net.cache_tokens(forgetful.keeper.cache) <= 18
    assert row["episodes_per_trial"] >= 2


@pytest.mark.parametrize(
    "mode, extra, tokens",
    [
        ("memo", {}, 6 * 4),  # 48 steps = 6 full segments: 6 summary blocks, no open segment
        ("fct", {"fct_window": 16}, 16),
        ("rmt", {}, 4),
    ],
)
def test_trials_report_episodes_and_the_cache_held_at_the_end(mode, extra, tokens):
    module = _module(mode, **extra)
    args = _args("--trial-len", "48", "--trials", "2", "--late-start", "20")
    row = objnav_memo.run_trials(module, ENV, args)
    assert row["episodes_per_trial"] >= 1 and 0 <= row["SR all"] <= 1
    assert {"SR ep0", "SPL ep20+", "SR t<48", "SR t>=20"} <= set(row)
    assert row["context_tokens"] == module.net.cache_tokens(module.keeper.cache) == tokens
    assert row["kv_bytes"] == tokens * 1 * 2 * 16 * 4
    oracle = objnav_memo.run_trials(None, ENV, args, baseline="oracle")
    assert oracle["SR all"] == 1.0 and oracle["context_tokens"] == 0
    # Every oracle episode succeeds, so late successes per 1000 steps are its late episodes' rate.
    assert oracle["successes_per_1k t>=20"] > 1000 / ENV["episode_len"]


def _train_tiny(tmp_path, name: str, model: dict):
    """A one-iteration ObjNav run of ``model`` (its run directory)."""
    from memrl.experiment.config import parse_config
    from memrl.experiment.train import train

    exp = parse_config(
        {
            "name": name,
            "env": {"id": "memrl/ObjNav-v0", "config": ENV},
            "algorithm": {"name": "ppo", "train_batch_size": 48, "minibatch_size": 48},
            "model": model,
            "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 2},
            "run": {"stop_iters": 1, "checkpoint_every": 1},
        }
    )
    return train(exp, run_dir=tmp_path / "run", echo=lambda *a: None)


@pytest.mark.slow
def test_bench_evaluates_a_trained_run(tmp_path, monkeypatch):
    model = {**TINY_MEMO, "l_sum": 4, "partial_update_steps": 24}
    _train_tiny(tmp_path, "tiny_memo", model)
    monkeypatch.chdir(tmp_path)  # a run given by a relative path, as on a command line
    args = _args(
        "--run", "run", "--trial-len", "96", "--trials", "2", "--memo-cap", "2",
        "--late-start", "50", "--time-bin", "40", "--output", str(tmp_path / "out"),
    )  # fmt: skip
    assert objnav_memo.run(args) == 0
    table = pd.read_parquet(tmp_path / "out" / "objnav-memo.parquet")
    assert table["variant"].tolist() == ["memo", "memo-stream2", "random", "oracle"]
    assert table["iteration"].tolist()[:2] == [1, 1]
    memo, stream = table.iloc[0], table.iloc[1]
    # 96 steps = 12 full segments: memo holds 12 summary blocks, the capped one 2.
    assert memo["context_tokens"] == 12 * 4 and stream["context_tokens"] == 2 * 4
    assert (tmp_path / "out" / "objnav-memo-buckets.png").is_file()
    # Success over trial time: 96 steps in stretches of 40: t = 0, 40, 80 for each policy.
    times = pd.read_parquet(tmp_path / "out" / "objnav-memo-time.parquet")
    assert times["policy"].tolist() == [
        p for p in ["memo run", "memo-stream2 run", "random", "oracle"] for _ in range(3)
    ]
    assert times["t"].tolist() == [0, 40, 80] * 4
    oracle = times[times.policy == "oracle"]
    wins = oracle.successes_per_1k * np.array([40, 40, 16]) * 2 / 1000  # stretch steps x trials
    assert np.allclose(wins, wins.round(), atol=0.01) and (wins.round() <= oracle.episodes).all()
    assert wins.sum() > 0
    assert oracle.episodes.sum() == table.iloc[3]["episodes_per_trial"] * 2
    assert (tmp_path / "out" / "objnav-memo-time.png").is_file()


@pytest.mark.slow
def test_bench_evaluates_a_memoryless_mlp_run(tmp_path, monkeypatch):
    run_dir = _train_tiny(tmp_path, "tiny_mlp", {"type": "mlp", "hiddens": [16]})
    monkeypatch.chdir(tmp_path)
    args = _args(
        "--run", "run", "--trial-len", "96", "--trials", "2", "--greedy",
        "--late-start", "50", "--no-baselines", "--output", str(tmp_path / "out"),
    )  # fmt: skip
    assert objnav_memo.run(args) == 0
    table = pd.read_parquet(tmp_path / "out" / "objnav-memo.parquet")
    assert table["variant"].tolist() == ["mlp"]
    row = table.iloc[0]
    assert row["context_tokens"] == 0 and row["kv_bytes"] == 0 and row["ms_per_step"] > 0
    # The greedy MLP is a fixed map from observation to action: a second run repeats it exactly.
    again = objnav_memo.run_trials(objnav_memo.load_policy(str(run_dir.path), {})[0], ENV, args)
    assert again["episodes_per_trial"] == row["episodes_per_trial"]


def test_append_keeps_other_variants_and_runs_of_an_earlier_report(tmp_path):
    path = tmp_path / "objnav-memo.parquet"
    old = [
        {"variant": "memo", "run": "s0", "SR all": 0.1},
        {"variant": "memo", "run": "s1", "SR all": 0.2},
        {"variant": "random", "run": "-", "SR all": None},
    ]
    pd.DataFrame(old).to_parquet(path)
    # s0 evaluated again replaces its row; the second seed's and the baseline's stay.
    rows = objnav_memo.earlier_rows(path, [{"variant": "memo", "run": "s0", "SR all": 0.3}])
    assert rows == [old[1], old[2], {"variant": "memo", "run": "s0", "SR all": 0.3}]
    assert objnav_memo.earlier_rows(tmp_path / "none.parquet", rows) == rows


@pytest.mark.parametrize("name", ["memo", "fct", "rmt", "memo_paper", "mlp"])
def test_objnav_configs_parse_with_the_paper_training_shape(name):
    from pathlib import Path

    import yaml

    from memrl.experiment.config import parse_config

    path = Path(__file__).parents[2] / "configs" / f"objnav_{name}.yaml"
    exp = parse_config(yaml.safe_load(path.read_text()))
    assert exp.env.id == "memrl/ObjNav-v0" and exp.env.config["trial_len"] == 4096
    if name != "mlp":
        assert exp.model.partial_update_steps == 256
        assert exp.model.mode == name.split("_")[0]
        assert exp.model.trial_len(exp) == 4096
    if name == "memo_paper":
        mc = exp.model.model_config(exp)
        assert (mc["d_model"], mc["n_layers"], mc["l_seg"], mc["l_sum"]) == (256, 4, 256, 32)
        assert mc["image_slice"] == [0, 792] and mc["image_shape"] == [4, 9, 22]
