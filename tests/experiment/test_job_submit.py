"""`ray job submit` for real: a local Ray head with token auth runs `memrl train` as a job.

The test starts its own head (`ray start --head` with a temp dir of its own, free ports, token auth
with a fresh token), submits the tiny config through `ray job submit --working-dir` exactly as
clusters/README.md tells users to, waits for SUCCEEDED, checks the run directory, and then stops
only the processes of that head (found by its temp dir): `ray stop` would also stop every other
Ray on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from memrl_testing import REPO, write_config

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
RAY = BIN / "ray"
# What the working-dir upload leaves out (the upload is capped at 500 MiB and should be small).
EXCLUDES = [".venv", "runs", "bench_out", ".git", "*.egg-info", ".pytest_cache", "__pycache__"]


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _kill_head(temp_dir: str) -> None:
    """Terminates the processes of the head started with ``temp_dir`` (and their children)."""
    import psutil

    me = os.getpid()
    roots = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if proc.info["pid"] != me and any(temp_dir in part for part in cmd):
            roots.append(proc)
    procs = set(roots)
    for proc in roots:
        with contextlib.suppress(psutil.Error):
            procs.update(proc.children(recursive=True))
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(list(procs), timeout=15)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)


@contextlib.contextmanager
def local_head(num_cpus: int = 2) -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray head on this machine with token auth; yields (dashboard URL, the client's env)."""
    # Short path: Ray's unix sockets live under the temp dir (108-byte limit).
    temp_dir = tempfile.mkdtemp(prefix="memrl-job-")
    gcs, dash, client, agent, agent_grpc, env_agent, metrics = _free_ports(7)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=secrets.token_hex(32),
        # The job's entrypoint (`memrl ...`) and its workers resolve from the head's PATH.
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        RAY_USAGE_STATS_ENABLED="0",
    )
    cmd = [
        str(RAY),
        "start",
        "--head",
        f"--port={gcs}",
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={num_cpus}",
        "--num-gpus=0",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dash}",
        f"--ray-client-server-port={client}",
        f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={env_agent}",
        f"--metrics-export-port={metrics}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        yield f"http://127.0.0.1:{dash}", env
    finally:
        _kill_head(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _job(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RAY), "job", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_ray_job_submit_runs_memrl_train_on_a_token_auth_head(tmp_path):
    cfg = write_config(tmp_path / "tiny.yaml")
    run = tmp_path / "run"
    with local_head() as (url, env):
        # A client without the token is turned away: token auth is really on.
        no_token = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN"}
        refused = _job({**no_token, "RAY_AUTH_MODE": "disabled"}, "list", "--address", url)
        assert refused.returncode != 0
        assert "401" in refused.stderr + refused.stdout or "auth" in refused.stderr.lower()

        submit = _job(
            env,
            "submit",
            "--address",
            url,
            "--no-wait",
            "--submission-id",
            "memrl-tiny",
            "--working-dir",
            ".",
            "--runtime-env-json",
            json.dumps({"excludes": EXCLUDES}),
            "--",
            "memrl",
            "train",
            str(cfg),
            "--output",
            str(run),
            timeout=120,
        )
        assert submit.returncode == 0, submit.stdout + submit.stderr
        # Follow the logs until the job ends (what a user watching the job does), then ask.
        logs = _job(env, "logs", "--address", url, "--follow", "memrl-tiny", timeout=480).stdout
        status = _job(env, "status", "--address", url, "memrl-tiny")
        assert "succeeded" in status.stdout.lower(), status.stdout + status.stderr + logs[-4000:]
    # The driver ran inside the job (joined the head: RAY_ADDRESS is set there) and wrote the run.
    assert "iter 2/2 | steps 800" in logs
    assert "run directory:" in logs
    df = pd.read_parquet(run / "metrics.parquet")
    assert list(df.training_iteration) == [1, 2]
    assert (run / "checkpoints" / "iter_000002").is_dir()
    assert (run / "curve.png").is_file()
