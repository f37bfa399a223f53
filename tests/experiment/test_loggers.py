"""run.loggers: TensorBoard with grouped tags, and W&B / MLflow through Ray's logger callbacks,
all offline (W&B offline mode, an MLflow file store) with the real libraries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memrl.experiment.loggers import RunLoggers, metric_tag, ray_logger_callbacks

ROWS = [
    {
        "training_iteration": i,
        "env_steps_sampled": 400 * i,
        "episode_return_mean": 0.5 * i,
        "inner_return_0": 0.1 * i,
        "learner_total_loss": 1.0 / i,
        "learner_rollout_peak_tokens": 100.0 + i,
        "learner_eval_em": 0.25 * i,
        "time_total_s": 2.0 * i,
        "num_episodes": float("nan"),  # not finite: never logged
    }
    for i in (1, 2, 3)
]


def test_tags_are_grouped():
    assert metric_tag("learner_total_loss") == "learner/total_loss"
    assert metric_tag("learner_default_optimizer_learning_rate") == (
        "learner/default_optimizer_learning_rate"
    )
    assert metric_tag("episode_return_mean") == "env/episode_return_mean"
    assert metric_tag("inner_return_3") == "env/inner_return_3"
    assert metric_tag("env_runner_restarts") == "env/env_runner_restarts"
    assert metric_tag("learner_rollout_peak_tokens") == "memory/rollout_peak_tokens"
    assert metric_tag("memory_kv_bytes") == "memory/kv_bytes"
    assert metric_tag("learner_rollout_dependency") == "memory/rollout_dependency"
    assert metric_tag("learner_eval_em") == "eval/em"
    assert metric_tag("time_this_iter_s") == "time/this_iter_s"


def test_tensorboard_reads_the_grouped_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    loggers = RunLoggers(["tensorboard"], tmp_path, "r", {"name": "r"})
    for row in ROWS:
        loggers.log(row)
    loggers.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "env/episode_return_mean",
        "env/inner_return_0",
        "learner/total_loss",
        "memory/rollout_peak_tokens",
        "eval/em",
        "time/total_s",
    } <= tags
    assert "env/num_episodes" not in tags
    points = events.Scalars("learner/total_loss")
    assert [p.step for p in points] == [1, 2, 3]
    assert [round(p.value, 4) for p in points] == [1.0, 0.5, 0.3333]


def test_mlflow_file_store_gets_params_and_metrics(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    config = {"name": "r", "algorithm": {"name": "ppo", "lr": 0.001}}
    loggers = RunLoggers(["mlflow"], tmp_path, "r", config)
    for row in ROWS:
        loggers.log(row)
    loggers.close()
    assert not (tmp_path / "tb").exists()
    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "memrl"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.params["algorithm.lr"] == "0.001" and run.data.tags["memrl_run"] == "r"
    history = client.get_metric_history(run.info.run_id, "learner/total_loss")
    assert [(m.step, round(m.value, 4)) for m in history] == [
        (400, 1.0),
        (800, 0.5),
        (1200, 0.3333),
    ]
    assert run.data.metrics["memory/rollout_peak_tokens"] == 103.0
    assert run.info.status == "FINISHED"


def _wandb_records(path: Path):
    """The records of a W&B run file (LevelDB log format: 32 KiB blocks of chunked records)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending + chunk)
            pending = b""
            yield record
        elif kind in (2, 3):  # first or middle chunk
            pending += chunk


@pytest.mark.slow
def test_wandb_offline_run_holds_every_iteration(tmp_path, monkeypatch):
    from memrl.experiment.ray_session import ray_session

    monkeypatch.setenv("WANDB_MODE", "offline")
    with ray_session(None, num_cpus=1):
        loggers = RunLoggers(["wandb"], tmp_path, "r", {"name": "r"})
        for row in ROWS:
            loggers.log(row)
        loggers.close()
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    history = [
        {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
        for r in _wandb_records(run_file)
        if r.WhichOneof("record_type") == "history"
    ]
    assert [h["learner/total_loss"] for h in history] == pytest.approx([1.0, 0.5, 1 / 3])
    assert [h["env/episode_return_mean"] for h in history] == [0.5, 1.0, 1.5]


def test_tune_gets_the_same_callbacks(tmp_path):
    kinds = [type(c).__name__ for c in ray_logger_callbacks(["wandb", "mlflow"], tmp_path, "s")]
    assert kinds == ["WandbLoggerCallback", "MLflowLoggerCallback"]
    assert ray_logger_callbacks(["tensorboard"], tmp_path, "s") == []
