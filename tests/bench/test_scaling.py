"""`memrl bench scaling`: the settings it measures and the configs it builds (the timed run itself
is a benchmark, not a test: no timing asserts)."""

from __future__ import annotations

import argparse
import math

import pytest

from memrl.bench import scaling
from memrl.experiment.build import build_algorithm_config
from memrl.experiment.config import parse_config
from memrl.rollout.env_runner import BulkEnvRunner
from memrl.rollout.overlap import OverlappedPPO


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    scaling.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_default_settings_cover_runners_learners_and_the_old_defaults():
    assert scaling.settings(_args()) == [
        (0, 0, 8, "rllib"),
        (0, 0, 256, "rllib"),
        (0, 0, 256, "sync"),
        (0, 0, 256, "vector"),
        (1, 0, 256, "vector"),
        (2, 0, 256, "vector"),
        (0, 0, 256, "bulk"),
        (1, 0, 256, "bulk"),
        (2, 0, 256, "bulk"),
        (0, 0, 64, "vector"),
        (1, 0, 64, "vector"),
        (0, 0, 64, "bulk"),
        (1, 0, 64, "bulk"),
        (0, 1, 256, "vector"),
        (0, 2, 256, "vector"),
        (0, 1, 256, "bulk"),
        (0, 0, 40, "memo"),
        (0, 0, 40, "memo-bulk"),
        (0, 0, 40, "memo-overlap"),
        (1, 0, 40, "memo"),
        (1, 0, 40, "memo-overlap"),
    ]
    assert scaling.settings(_args("--quick", "--learners", "", "--memo-config", "")) == [
        (0, 0, 256, "vector"),
        (1, 0, 256, "vector"),
        (2, 0, 256, "vector"),
        (0, 0, 256, "bulk"),
        (1, 0, 256, "bulk"),
        (2, 0, 256, "bulk"),
    ]
    with pytest.raises(ValueError, match="must be >= 0"):
        scaling.settings(_args("--runners", "-1"))


def test_every_setting_is_a_valid_experiment_with_the_same_total_batch():
    args = _args()
    for runners, learners, envs, mode in scaling.settings(args):
        exp = parse_config(scaling.experiment(runners, learners, envs, args, mode))
        assert exp.resources.num_env_runners == runners and exp.resources.num_learners == learners
        assert exp.resources.num_envs_per_env_runner == envs
        rllib = mode == "rllib"
        bulk = mode in ("bulk", "memo-bulk", "memo-overlap")
        vectorize = "sync" if rllib else mode if mode in ("sync", "vector") else "vector"
        assert exp.resources.env_vectorize_mode == vectorize
        assert exp.resources.sampler == ("bulk" if bulk else "episodes")
        algo = build_algorithm_config(exp)
        assert (algo.env_runner_cls is not None) is bulk
        assert exp.resources.overlap_sampling is (mode == "memo-overlap")
        assert (algo.algo_class is OverlappedPPO) is (mode == "memo-overlap")
        assert (exp.model.TAG_KEY[1] == "memo") is mode.startswith("memo")
        if mode.startswith("memo"):
            # configs/memo_key_door.yaml's model and PPO batch settings, not the MLP rows'.
            assert exp.model.l_seg == 20
            assert (exp.algorithm.train_batch_size, exp.algorithm.minibatch_size) == (4000, 1000)
            assert exp.algorithm.num_epochs == 2 != args.epochs
            continue
        assert issubclass(algo.env_runner_cls or BulkEnvRunner, BulkEnvRunner)
        assert exp.model.lean_connectors is not rllib
        assert exp.env.normalize_actions is (True if rllib else None)
        assert exp.algorithm.train_batch_size * max(1, learners) == args.train_batch


def test_raw_env_speed_is_a_positive_rate():
    per_wall_s, per_cpu_s = scaling.raw_env_speed(2000)
    assert math.isfinite(per_wall_s) and per_wall_s > 0 and math.isfinite(per_cpu_s)
    assert per_cpu_s >= per_wall_s * 0.5  # a CPU second is never much longer than a wall second
    per_wall_s, per_cpu_s = scaling.raw_vector_env_speed(16, 2000)
    assert math.isfinite(per_wall_s) and per_wall_s > 0 and math.isfinite(per_cpu_s)


def test_raw_rows_put_the_vector_env_beside_the_scalar_env_and_divide_by_the_scalar_one():
    measured = scaling.raw_speeds(2000, 16)
    vector = ("raw vector env, 16 envs", 16, "vector")
    assert list(measured) == [scaling.RAW_SCALAR, vector]
    assert all(wall > 0 and cpu > 0 for wall, cpu in measured.values())
    # Three rounds (before, between and after two settings): each row is its own median.
    raws = [
        {scaling.RAW_SCALAR: (100.0, 110.0), vector: (1000.0, 1200.0)},
        {scaling.RAW_SCALAR: (80.0, 100.0), vector: (3000.0, 1500.0)},
        {scaling.RAW_SCALAR: (120.0, 90.0), vector: (2000.0, 1000.0)},
    ]
    scalar_row, vector_row = scaling.raw_rows(raws)
    assert (scalar_row["setting"], scalar_row["envs_per_runner"]) == ("raw scalar env", 1)
    assert (vector_row["setting"], vector_row["envs_per_runner"]) == vector[:2]
    assert scalar_row["sampling_steps_per_s"] == 100.0 and scalar_row["sampling_frac_of_raw"] == 1
    assert vector_row["sampling_steps_per_s"] == 2000.0
    assert vector_row["sampling_steps_per_cpu_s"] == 1200.0
    assert vector_row["raw_steps_per_s"] == 100.0
    assert vector_row["sampling_frac_of_raw"] == pytest.approx(20.0)
    assert vector_row["pipeline_cpu_frac_of_raw"] == pytest.approx(1200.0 / 100.0)
