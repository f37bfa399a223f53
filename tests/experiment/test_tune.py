"""`memrl tune`: the `tune:` section's parsing and errors, and a real sweep that is interrupted
(SIGINT, as Ctrl+C) and resumed from the CLI on an embedded Ray."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from memrl_testing import REPO, TINY, memrl_background, memrl_cli, write_config

from memrl.experiment.config import load_yaml
from memrl.experiment.tune import check_search_space, trial_experiment
from memrl.experiment.tune_space import (
    ASHASettings,
    PBTSettings,
    SearchDimension,
    parse_tune_settings,
)

SPACE = {
    "model.hiddens": {"choice": [[16], [32, 32]]},
    "algorithm.lr": {"loguniform": [1.0e-4, 1.0e-3]},
    "algorithm.gamma": {"uniform": [0.9, 0.99]},
    "env.config.size": {"grid": [4, 5]},
}


def test_tune_section_parses_into_settings_and_a_nested_param_space():
    settings = parse_tune_settings(
        {
            "metric": "episode_len_mean",
            "mode": "min",
            "num_samples": 3,
            "search_space": SPACE,
            "scheduler": {"type": "asha", "grace_period": 2},
        }
    )
    assert settings.mode == "min" and settings.num_trials() == 3 * 2
    assert isinstance(settings.scheduler, ASHASettings) and settings.scheduler.grace_period == 2
    space = settings.param_space()
    assert space["env"]["config"]["size"] == {"grid_search": [4, 5]}
    assert space["algorithm"]["lr"].lower == 1.0e-4 and space["algorithm"]["lr"].upper == 1.0e-3
    check_search_space(TINY, settings)  # every key exists in the experiment config


def test_trial_experiment_applies_the_sampled_values_like_set():
    exp = trial_experiment(
        {**TINY, "tune": {"search_space": SPACE}},
        {
            "algorithm": {"lr": 2.5e-4},
            "model": {"hiddens": [32, 32]},
            "env": {"config": {"size": 5}},
        },
    )
    assert exp.algorithm.lr == 2.5e-4 and exp.model.hiddens == [32, 32]
    assert exp.env.config == {"size": 5, "episode_len": 10, "trial_len": 40}
    assert exp.tune is None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (None, "the config has no tune: section"),
        ({"search_space": {}}, "tune.search_space is empty"),
        ({"search_space": {"algorithm.lr": [1, 2]}}, "tune.search_space.algorithm.lr must be a"),
        ({"search_space": {"algorithm.lr": {"normal": [0, 1]}}}, "unknown kind 'normal'"),
        ({"search_space": {"algorithm.lr": {"uniform": [0.1]}}}, "must be [low, high] numbers"),
        ({"search_space": {"algorithm.lr": {"loguniform": [0, 1]}}}, "needs low > 0"),
        ({"search_space": {"algorithm.lr": {"uniform": [2, 1]}}}, "needs low < high"),
        ({"search_space": SPACE, "mode": "best"}, "tune.mode must be one of ['max', 'min']"),
        ({"search_space": SPACE, "metrics": "x"}, "Unknown key(s) tune.metrics"),
        ({"search_space": SPACE, "scheduler": {"type": "hyperband"}}, "Available: ['asha'"),
        (
            {"search_space": SPACE, "scheduler": {"type": "asha", "grace": 1}},
            "Unknown key(s) tune.scheduler.grace",
        ),
    ],
)
def test_bad_tune_sections_name_the_key(section, message):
    with pytest.raises((ValueError, TypeError)) as err:
        parse_tune_settings(section)
    assert message in str(err.value)


def test_search_keys_that_do_not_fit_the_config_are_refused_before_ray_starts():
    bad_key = parse_tune_settings({"search_space": {"algorithm.learning_rate": {"grid": [1]}}})
    with pytest.raises(ValueError, match="tune.search_space.algorithm.learning_rate = 1 does not"):
        check_search_space(TINY, bad_key)
    bad_value = parse_tune_settings({"search_space": {"algorithm.num_epochs": {"grid": [1, 0]}}})
    with pytest.raises(ValueError, match="algorithm.num_epochs = 0 does not fit"):
        check_search_space(TINY, bad_value)


def test_asha_takes_max_t_from_the_run_and_checks_it():
    from memrl.experiment.config import parse_config

    exp = parse_config({**TINY, "run": {"stop_iters": 12}})
    settings = parse_tune_settings({"search_space": SPACE, "scheduler": {"type": "asha"}})
    asha = settings.scheduler.make(settings, exp)
    assert asha._max_t == 12 and asha._time_attr == "training_iteration"
    late = parse_tune_settings(
        {"search_space": SPACE, "scheduler": {"type": "asha", "grace_period": 20}}
    )
    with pytest.raises(ValueError, match=r"max_t \(12\) must be >= grace_period \(20\)"):
        late.scheduler.make(late, exp)


def test_pbt_mutates_the_random_keys_and_rejects_unknown_ones():
    from memrl.experiment.config import parse_config

    exp = parse_config(TINY)
    settings = parse_tune_settings({"search_space": SPACE, "scheduler": {"type": "pbt"}})
    assert isinstance(settings.scheduler, PBTSettings)
    pbt = settings.scheduler.make(settings, exp)
    assert set(pbt._hyperparam_mutations) == {"model", "algorithm"}  # not the grid's env key
    bad = parse_tune_settings(
        {"search_space": SPACE, "scheduler": {"type": "pbt", "mutate": ["algorithm.clip"]}}
    )
    with pytest.raises(ValueError, match=r"mutate names \['algorithm.clip'\]"):
        bad.scheduler.make(bad, exp)


def test_the_shipped_tune_config_is_valid():
    base = load_yaml(REPO / "configs" / "tune_memo_key_door.yaml")
    settings = parse_tune_settings(base["tune"])
    check_search_space(base, settings)
    keys = {d.key for d in settings.dimensions()}
    assert {"model.l_sum", "model.l_seg", "algorithm.lr"} <= keys
    assert {d.kind for d in settings.dimensions()} == {"grid", "loguniform"}
    assert isinstance(settings.scheduler, ASHASettings) and settings.num_trials() == 6
    assert SearchDimension.parse("x", {"choice": [1, 2]}).example() == 1


@pytest.mark.slow
def test_sweep_from_the_cli_is_interrupted_and_resumes(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    cfg = write_config(
        tmp_path / "sweep.yaml",
        resources={"num_env_runners": 0, "num_envs_per_env_runner": 2},
        # Long enough that the interrupt, sent after the first checkpoint, lands mid-trial
        # (a bulk-path iteration here takes ~0.3 s: 8 of them ended a trial before the poll).
        run={"stop_iters": 40, "checkpoint_every": 1},
        tune={
            "metric": "episode_return_mean",
            "mode": "max",
            "max_concurrent_trials": 1,  # the second trial waits, so the interrupt finds it unrun
            "search_space": {"algorithm.lr": {"grid": [1.0e-4, 1.0e-3]}},
            "keep_checkpoints": 3,
        },
    )
    sweep = tmp_path / "sweep"
    proc = memrl_background("tune", str(cfg), "--output", str(sweep), env={"HOME": str(home)})
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            # Any checkpoint: with keep_checkpoints 3 the first is gone after the fourth.
            if list(sweep.glob("*/checkpoint_*")):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"no trial checkpointed; output:\n{proc.communicate()[0][-4000:]}")
        proc.send_signal(signal.SIGINT)  # Ctrl+C: Tune saves its state and stops the trials
        first_out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, first_out[-4000:]
    assert "the sweep did not finish" in first_out and "--resume" in first_out
    before = pd.read_parquet(sweep / "trials.parquet")
    interrupted = before[(before.status != "TERMINATED") & (before.iterations > 0)]
    assert len(interrupted) == 1, before  # one trial was stopped part-way

    again = memrl_cli("tune", str(cfg), "--output", str(sweep), env={"HOME": str(home)})
    assert again.returncode == 2 and "already holds a sweep. Use --resume" in again.stderr

    resumed = memrl_cli(
        "tune", str(cfg), "--output", str(sweep), "--resume", env={"HOME": str(home)}, timeout=420
    )
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
    assert f"resuming the sweep in {sweep}" in resumed.stdout
    assert "best trial:" in resumed.stdout
    df = pd.read_parquet(sweep / "trials.parquet")
    assert sorted(df["algorithm.lr"]) == [1.0e-4, 1.0e-3]
    assert list(df.status) == ["TERMINATED", "TERMINATED"]
    assert list(df.iterations) == [40, 40] and list(df.env_steps_sampled) == [16000, 16000]
    # The interrupted trial went on from its checkpoint instead of starting over.
    first = df[df.trial_id == interrupted.trial_id.iloc[0]].iloc[0]
    assert first.iterations_since_restore < first.iterations
    assert (sweep / "summary.md").read_text().count("TERMINATED") == 2
    assert yaml.safe_load((sweep / "sweep.yaml").read_text())["tune"]["max_concurrent_trials"] == 1
    assert not (home / "ray_results").exists() and not (home / ".ray").exists()
    assert not list(Path(tmp_path).glob("**/ray_results"))
