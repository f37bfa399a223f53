"""`ray job submit` for real: a local Ray head with token auth runs `memrl train` as a job.

The test starts its own head (tests/local_cluster.py: `ray start --head` with a temp dir of its
own, free ports, token auth with a fresh token), submits the tiny config through `ray job submit
--working-dir` exactly as clusters/README.md tells users to, waits for SUCCEEDED, checks the run
directory, and then stops only the processes of that head (found by its temp dir): `ray stop`
would also stop every other Ray on the machine.
"""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest
from local_cluster import RAY, local_cluster, wait_for
from memrl_testing import REPO, write_config

from memrl.experiment.tables import read_table

pytestmark = pytest.mark.slow


def test_ray_job_submit_runs_memrl_train_on_a_token_auth_head(tmp_path):
    cfg = write_config(tmp_path / "tiny.yaml")
    run = tmp_path / "run"
    with local_cluster("memrl-job-") as cluster:
        cluster.start_head(num_cpus=2)
        # A client without the token is turned away: token auth is really on.
        no_token = {k: v for k, v in cluster.env.items() if k != "RAY_AUTH_TOKEN"}
        refused = subprocess.run(
            [str(RAY), "job", "list", "--address", cluster.dashboard_url],
            env={**no_token, "RAY_AUTH_MODE": "disabled"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode != 0
        assert "401" in refused.stderr + refused.stdout or "auth" in refused.stderr.lower()

        cluster.submit("memrl-tiny", ["memrl", "train", str(cfg), "--output", str(run)], cwd=REPO)
        # Follow the logs until the job ends (what a user watching the job does), then ask.
        status, logs = cluster.wait_job("memrl-tiny", timeout=480)
        assert status == "SUCCEEDED", logs[-4000:]
    # The driver ran inside the job (joined the head: RAY_ADDRESS is set there) and wrote the run.
    assert "iter 2/2 | steps 800" in logs
    assert "run directory:" in logs
    df = pd.read_parquet(run / "metrics.parquet")
    assert list(df.training_iteration) == [1, 2]
    assert (run / "checkpoints" / "iter_000002").is_dir()
    assert (run / "curve.png").is_file()


def test_ray_job_stop_ends_the_run_after_its_iteration_with_a_checkpoint(tmp_path):
    """`ray job stop` sends SIGTERM, then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S: given the time
    in the job's env_vars (as README says), the run stops cleanly with its last iteration saved."""
    cfg = write_config(tmp_path / "long.yaml", run={"stop_iters": 200, "checkpoint_every": 50})
    run = tmp_path / "run"
    with local_cluster("memrl-jobstop-") as cluster:
        cluster.start_head(num_cpus=2)
        cluster.submit(
            "memrl-long",
            ["memrl", "train", str(cfg), "--output", str(run)],
            cwd=REPO,
            env_vars={"RAY_JOB_STOP_WAIT_TIME_S": "120"},
        )

        def rows() -> int:
            path = run / "metrics.parquet"
            return len(read_table(path)) if path.exists() else 0

        wait_for(lambda: rows() >= 3, 480, "3 training iterations of the job")
        stop = cluster.job("stop", "memrl-long", timeout=180)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        status, logs = cluster.wait_job("memrl-long", timeout=180)
    assert status == "STOPPED", logs[-4000:]
    last = int(pd.read_parquet(run / "metrics.parquet").training_iteration.iloc[-1])
    assert 3 <= last < 50, logs[-4000:]  # before the first periodic checkpoint
    assert f"stopped on SIGTERM after iteration {last}, its checkpoint saved" in logs
    assert [p.name for p in (run / "checkpoints").iterdir()] == [f"iter_{last:06d}"]
    assert (run / "summary.md").is_file()
