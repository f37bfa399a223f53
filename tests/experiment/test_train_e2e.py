"""`memrl train` end to end on a real embedded Ray: outputs, resume after kill -9, env faults."""

from __future__ import annotations

import os
import signal
import time

import pandas as pd
import pytest
import yaml
from memrl_testing import memrl_background, memrl_cli, write_config

from memrl.experiment.tables import read_table

pytestmark = pytest.mark.slow

REQUIRED_COLUMNS = {
    "training_iteration",
    "env_steps_sampled",
    "episode_return_mean",
    "episode_len_mean",
    "time_total_s",
    "learner_policy_loss",
    "learner_vf_loss",
    "learner_total_loss",
}


def test_train_writes_a_complete_run_dir_and_eval_reads_it(tmp_path):
    cfg = write_config(tmp_path / "tiny.yaml")
    run = tmp_path / "run"
    home = tmp_path / "home"
    home.mkdir()
    out = memrl_cli(
        "train", str(cfg), "--output", str(run), "--stop-iters", "2", env={"HOME": str(home)}
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "iter 1/2 | steps 400" in out.stdout and "iter 2/2 | steps 800" in out.stdout
    assert "return_last" in out.stdout  # the summary table
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["algorithm"]["name"] == "ppo" and saved["run"]["stop_iters"] == 2
    assert saved["resources"]["num_envs_per_env_runner"] == 2  # fully resolved, defaults filled
    df = pd.read_parquet(run / "metrics.parquet")
    assert REQUIRED_COLUMNS <= set(df.columns)
    assert {"inner_return_0", "inner_return_sq_0", "inner_success_rate"} <= set(df.columns)
    assert list(df.training_iteration) == [1, 2] and list(df.env_steps_sampled) == [400, 800]
    assert list(df.acting_lag) == [0, 0]  # PPO acts each batch with the learner's weights
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_000001", "iter_000002"]
    assert any(p.name.startswith("events.out.tfevents") for p in (run / "tb").iterdir())
    assert (run / "curve.png").stat().st_size > 1000
    assert 'id="training"' in (run / "report.html").read_text()
    # No Ray state in the home dir (matplotlib's font cache in ~/.cache is fine).
    assert not (home / "ray_results").exists() and not (home / ".ray").exists()

    result_file = tmp_path / "eval.json"
    ev = memrl_cli(
        "eval",
        str(run / "checkpoints" / "iter_000002"),
        "--episodes",
        "3",
        "--output",
        str(result_file),
    )
    assert ev.returncode == 0, ev.stderr
    import json

    result = json.loads(result_file.read_text())
    assert result["episodes"] == 3 and len(result["returns"]) == 3
    assert result["len_mean"] == 40.0  # trial_len of the tiny config
    assert len(result["inner_return_by_index"]) >= 4  # 10-step inner episodes in a 40-step trial

    # The same run on storage (a file:// URI takes the path of s3:// or gs://): eval reads the
    # newest checkpoint from there and writes its results and the report back.
    import shutil

    from memrl.experiment.evaluate import open_checkpoint
    from memrl.experiment.export import export_checkpoint

    stored = tmp_path / "bucket" / "runs" / "tiny"
    shutil.copytree(run, stored)
    ev = memrl_cli("eval", stored.as_uri(), "--episodes", "2")
    assert ev.returncode == 0, ev.stderr
    uri_ckpt = f"{stored.as_uri()}/checkpoints/iter_000002"
    assert f"{uri_ckpt}: 2 episodes" in ev.stdout
    kept = json.loads((stored / "eval" / "iter_000002.json").read_text())
    assert kept["episodes"] == 2 and kept["checkpoint"] == uri_ckpt
    assert "Evaluation of iter_000002 over 2 episodes" in (stored / "report.html").read_text()
    assert f"report: {stored.as_uri()}/report.html" in ev.stdout
    exported = export_checkpoint(uri_ckpt, "rlmodule", tmp_path / "export")
    assert json.loads((exported / "memrl_export.json").read_text())["checkpoint"] == uri_ckpt
    with pytest.raises(FileNotFoundError, match="complete ones: iter_000001, iter_000002"):
        with open_checkpoint(f"{stored.as_uri()}/checkpoints/iter_000007"):
            pass
    shutil.rmtree(stored / "checkpoints")
    with pytest.raises(FileNotFoundError, match="has no checkpoint yet"):
        with open_checkpoint(stored.as_uri()):
            pass


def test_existing_run_needs_resume_and_too_many_runners_is_refused(tmp_path):
    cfg = write_config(tmp_path / "tiny.yaml", resources={"num_env_runners": 64})
    out = memrl_cli("train", str(cfg), "--output", str(tmp_path / "r"))
    assert out.returncode == 2
    assert "resources ask for 64 CPUs" in out.stderr and "Traceback" not in out.stderr
    (tmp_path / "r2" / "checkpoints" / "iter_000001").mkdir(parents=True)
    out = memrl_cli(
        "train", str(write_config(tmp_path / "t2.yaml")), "--output", str(tmp_path / "r2")
    )
    assert out.returncode == 2 and "already holds a run. Use --resume" in out.stderr
    out = memrl_cli(
        "train",
        str(write_config(tmp_path / "t3.yaml")),
        "--output",
        str(tmp_path / "r3"),
        "--resume",
    )
    assert out.returncode == 2 and "nothing to resume" in out.stderr


def _wait_for_rows(run, rows: int, timeout: float = 600) -> None:
    """Waits until a training run's metrics hold ``rows`` iterations (a generous deadline: Ray
    starts slowly on a loaded machine)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (run / "metrics.parquet").exists():
            if len(read_table(run / "metrics.parquet")) >= rows:
                return
        time.sleep(0.2)
    pytest.fail("training made no progress")


def test_resume_after_kill_continues_without_gaps(tmp_path):
    cfg = write_config(tmp_path / "tiny.yaml", run={"stop_iters": 50, "checkpoint_every": 2})
    run = tmp_path / "run"
    proc = memrl_background("train", str(cfg), "--output", str(run))
    try:
        # Kill between checkpoints: after iteration 5 (checkpoint at 4), so row 5 must be redone.
        _wait_for_rows(run, 5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_rows = pd.read_parquet(run / "metrics.parquet")
    last_ckpt = max(int(p.name.split("_")[1]) for p in (run / "checkpoints").glob("iter_*"))
    assert len(killed_rows) >= 5 and last_ckpt >= 4
    out = memrl_cli(
        "train", str(cfg), "--output", str(run), "--resume", "--stop-iters", str(last_ckpt + 2)
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"resuming from {run / 'checkpoints' / f'iter_{last_ckpt:06d}'}" in out.stdout
    assert f"iter {last_ckpt + 1}/" in out.stdout
    df = pd.read_parquet(run / "metrics.parquet")
    assert list(df.training_iteration) == list(range(1, last_ckpt + 3))
    steps = list(df.env_steps_sampled)
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert steps[last_ckpt] == steps[last_ckpt - 1] + 400  # the counter continued


def test_sigterm_stops_after_the_iteration_with_a_checkpoint_and_summary(tmp_path):
    """`ray job stop` and schedulers send SIGTERM: the run ends as at its stop criteria, with a
    checkpoint of its last iteration (not only the periodic ones) and its summary."""
    cfg = write_config(tmp_path / "tiny.yaml", run={"stop_iters": 50, "checkpoint_every": 20})
    run = tmp_path / "run"
    proc = memrl_background("train", str(cfg), "--output", str(run))
    try:
        _wait_for_rows(run, 3)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    rows = pd.read_parquet(run / "metrics.parquet")
    last = int(rows.training_iteration.iloc[-1])
    assert 3 <= last < 20, out  # stopped long before stop_iters and the first periodic save
    assert list(rows.training_iteration) == list(range(1, last + 1))
    assert "SIGTERM: stopping after this iteration" in out
    assert f"stopped on SIGTERM after iteration {last}, its checkpoint saved" in out
    assert [p.name for p in (run / "checkpoints").iterdir()] == [f"iter_{last:06d}"]
    assert "return_last" in (run / "summary.md").read_text()


def test_restored_weights_reach_remote_env_runners(tmp_path):
    """After restore_from_path + the explicit sync, remote runners act with the saved weights."""
    import numpy as np
    import ray
    import torch

    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.checkpoints import build_algo, sync_env_runner_weights
    from memrl.experiment.config import load_config
    from memrl.experiment.ray_session import ray_session

    exp = load_config(write_config(tmp_path / "tiny.yaml"))

    def runner_weights(algo):
        states = algo.env_runner_group.foreach_env_runner(
            lambda r: {
                k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v
                for k, v in r.module.state_dict().items()
            },
            local_env_runner=False,
        )
        return states[0]

    with ray_session(None, num_cpus=2):
        trained = build_algo(build_algorithm_config(exp), tmp_path / "rllib")
        for _ in range(2):
            trained.train()
        trained.save_to_path(str(tmp_path / "ckpt"))
        saved = runner_weights(trained)
        trained.stop()

        fresh = build_algo(build_algorithm_config(exp), tmp_path / "rllib")
        before = runner_weights(fresh)
        assert any(not np.allclose(before[k], saved[k]) for k in saved)  # the test can fail
        fresh.restore_from_path(str(tmp_path / "ckpt"))
        sync_env_runner_weights(fresh)
        after = runner_weights(fresh)
        for k in saved:
            np.testing.assert_allclose(after[k], saved[k], err_msg=k)
        learner = fresh.learner_group.get_weights()["default_policy"]
        for k, v in learner.items():
            if k in after:
                np.testing.assert_allclose(after[k], np.asarray(v), err_msg=k)
        fresh.stop()
    assert not ray.is_initialized()


def test_env_runner_fault_does_not_end_the_run(tmp_path):
    cfg = write_config(
        tmp_path / "faulty.yaml",
        env={
            "id": "memrl/DarkKeyToDoor-v0",
            "config": {"size": 4, "episode_len": 10, "trial_len": 40},
            "fault_injection": {"step_error_probability": 0.004, "env_runner_indices": [1]},
        },
        resources={"num_env_runners": 2, "num_envs_per_env_runner": 2},
        fault_tolerance={
            "delay_between_env_runner_restarts_s": 0.1,
            "restart_failed_sub_environments": False,
        },
        run={"stop_iters": 12, "checkpoint_every": 4},
    )
    run = tmp_path / "run"
    out = memrl_cli("train", str(cfg), "--output", str(run))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    df = pd.read_parquet(run / "metrics.parquet")
    assert list(df.training_iteration) == list(range(1, 13))
    assert (df.env_runners_down > 0).any()  # the crash was counted ...
    assert df.env_runner_restarts.iloc[-1] >= 1  # ... and the runner came back
    assert sorted(p.name for p in (run / "checkpoints").iterdir())[-1] == "iter_000012"
    assert "InjectedEnvError" in out.stdout + out.stderr  # the failure was logged
    assert "runners down" in out.stdout  # and shown on the progress line


def test_env_fault_in_the_local_runner_recreates_the_env(tmp_path):
    """With the default restart_failed_sub_environments, a failing env is rebuilt in place."""
    cfg = write_config(
        tmp_path / "faulty_local.yaml",
        env={
            "id": "memrl/DarkKeyToDoor-v0",
            "config": {"size": 4, "episode_len": 10, "trial_len": 40},
            "fault_injection": {"step_error_probability": 0.002, "env_runner_indices": [0]},
        },
        resources={"num_env_runners": 0, "num_envs_per_env_runner": 2},
        run={"stop_iters": 4, "checkpoint_every": 2},
    )
    run = tmp_path / "run"
    out = memrl_cli("train", str(cfg), "--output", str(run))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    df = pd.read_parquet(run / "metrics.parquet")
    assert list(df.training_iteration) == [1, 2, 3, 4]
    assert df.env_step_failures.iloc[-1] >= 1
    assert "env-failures" in out.stdout and "InjectedEnvError" in out.stdout + out.stderr
