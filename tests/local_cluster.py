"""A real multi-node Ray cluster on this machine, one `ray start` per node, for the cluster tests.

Each node is what a machine of a cluster runs: its own raylet (with the CPUs and custom resources
given, e.g. ``{"browser": 2}``), object store, dashboard agent and runtime-env agent, started by
``ray start`` exactly as on a real node, with a temp dir of its own. The head adds the GCS, the
dashboard (the job API) and, with ``autoscaling_config``, Ray's autoscaler (the fake multi-node
provider starts and stops its worker nodes). Every node runs with token auth and a fresh token
(as memrl's embedded Ray does), on 127.0.0.1 and free ports, so the cluster shares the machine
with other Ray instances without touching them: ``ray stop`` would stop every Ray on the machine,
so a node is stopped by terminating the processes started under its temp dir, and ``kill_node``
SIGKILLs them all at once, as the loss of the machine would.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
RAY = BIN / "ray"
# What a working-dir upload leaves out (the upload is capped at 500 MiB and should be small).
EXCLUDES = [".venv", "runs", "bench_out", ".git", "*.egg-info", ".pytest_cache", "__pycache__"]
OBJECT_STORE_BYTES = 200 * 1024 * 1024


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def node_processes(temp_dir: str) -> list[Any]:
    """The processes of the node started with ``temp_dir``: those naming it on their command
    line (raylet, agents, GCS, dashboard, autoscaler) and all their descendants (workers, whose
    command line Ray rewrites to ``ray::...``)."""
    import psutil

    me = os.getpid()
    roots = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmd = proc.info["cmdline"] or []
            if proc.info["pid"] != me and any(temp_dir in part for part in cmd):
                roots.append(proc)
    procs = {p.pid: p for p in roots}
    for proc in roots:
        with contextlib.suppress(psutil.Error):
            procs.update({c.pid: c for c in proc.children(recursive=True)})
    procs.pop(me, None)
    return list(procs.values())


def stop_processes(procs: list[Any], *, hard: bool) -> None:
    import psutil

    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)


@dataclass
class Node:
    """One `ray start` node of the cluster."""

    name: str
    temp_dir: str
    resources: dict[str, float]
    num_cpus: int
    killed: bool = False

    @property
    def marker(self) -> str:
        """A resource only this node has: how Ray's state API output is mapped to our nodes."""
        return f"test_node_{self.name}"


@dataclass
class LocalCluster:
    """A head and worker nodes on this machine (see the module docstring)."""

    root: str
    env: dict[str, str]
    gcs_port: int = 0
    dashboard_port: int = 0
    nodes: dict[str, Node] = field(default_factory=dict)

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _start(
        self,
        name: str,
        args: list[str],
        num_cpus: int,
        resources: dict[str, float],
        env: dict[str, str] | None = None,
    ) -> Node:
        if name in self.nodes and not self.nodes[name].killed:
            raise ValueError(f"node {name!r} is already running")
        temp_dir = os.path.join(self.root, name)
        node = Node(name, temp_dir, dict(resources), num_cpus)
        agent, agent_grpc, env_agent, metrics = free_ports(4)
        cmd = [
            str(RAY),
            "start",
            *args,
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={num_cpus}",
            "--num-gpus=0",
            f"--resources={json.dumps({**resources, node.marker: 1})}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--min-worker-port=0",
            "--max-worker-port=0",
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={env_agent}",
            f"--metrics-export-port={metrics}",
            f"--temp-dir={temp_dir}",
            "--disable-usage-stats",
        ]
        out = subprocess.run(
            cmd, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=240
        )
        if out.returncode != 0:
            raise RuntimeError(f"ray start of node {name!r} failed:\n{out.stdout}{out.stderr}")
        self.nodes[name] = node
        return node

    def start_head(
        self,
        num_cpus: int = 1,
        resources: dict[str, float] | None = None,
        *,
        autoscaling_config: str | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> Node:
        """Starts the head (``env``: extra environment of its processes, e.g. for the
        autoscaler; ``port``: its GCS port, default a free one)."""
        self.gcs_port, self.dashboard_port, client = free_ports(3)
        self.gcs_port = port or self.gcs_port
        args = [
            "--head",
            f"--port={self.gcs_port}",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--ray-client-server-port={client}",
        ]
        if autoscaling_config:
            args.append(f"--autoscaling-config={autoscaling_config}")
        return self._start("head", args, num_cpus, resources or {}, env)

    def add_node(self, name: str, num_cpus: int, resources: dict[str, float]) -> Node:
        return self._start(name, [f"--address={self.gcs_address}"], num_cpus, resources)

    def kill_node(self, name: str) -> float:
        """SIGKILLs every process of the node at once (a machine loss); returns the time."""
        node = self.nodes[name]
        procs = node_processes(node.temp_dir)
        if not procs:
            raise RuntimeError(f"node {name!r} has no processes to kill")
        t = time.time()
        stop_processes(procs, hard=True)
        node.killed = True
        return t

    def shutdown(self) -> None:
        # Workers first, the head last (its autoscaler's nodes live under the head's temp dir).
        for node in sorted(self.nodes.values(), key=lambda n: n.name == "head"):
            stop_processes(node_processes(node.temp_dir), hard=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def state(self, kind: str, *filters: str) -> list[dict[str, Any]]:
        """`ray list KIND --detail` (Ray's state API) as a user runs it, parsed."""
        out = subprocess.run(
            [str(RAY), "list", kind, "--address", self.dashboard_url, "--format", "json"]
            + ["--detail", "--limit", "10000"]
            + [arg for f in filters for arg in ("--filter", f)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode != 0:
            raise RuntimeError(f"ray list {kind} failed:\n{out.stdout}{out.stderr}")
        if out.stdout.startswith("No resource"):  # what the CLI prints for an empty list
            return []
        return json.loads(out.stdout)

    def node_names(self) -> dict[str, str]:
        """Ray node id -> our node name, for the nodes alive now."""
        names = {}
        for info in self.state("nodes", "state=ALIVE"):
            for node in self.nodes.values():
                if node.marker in info.get("resources_total", {}):
                    names[info["node_id"]] = node.name
        return names

    def actor_nodes(self, class_name: str) -> list[str]:
        """Our node names hosting the ALIVE actors whose class name ends with ``class_name``
        (one entry per actor; Ray Train names RLlib's learner actors
        ``create_executable_class.<locals>._WrappedExecutable``)."""
        names = self.node_names()
        actors = [
            a
            for a in self.state("actors", "state=ALIVE")
            if a.get("class_name", "").endswith(class_name)
        ]
        return sorted(names.get(a["node_id"], a["node_id"]) for a in actors)

    def job(self, *args: str, timeout: float = 60, cwd: Path | None = None):
        """`ray job ARGS --address <this head>` as a user runs it."""
        return subprocess.run(
            [str(RAY), "job", *args[:1], "--address", self.dashboard_url, *args[1:]],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def submit(
        self,
        submission_id: str,
        entrypoint: list[str],
        cwd: Path,
        env_vars: dict[str, str] | None = None,
    ) -> None:
        """`ray job submit --working-dir .` of an entrypoint (with ``env_vars`` in its runtime
        env), without waiting for it."""
        runtime_env: dict[str, Any] = {"excludes": EXCLUDES}
        if env_vars:
            runtime_env["env_vars"] = env_vars
        out = self.job(
            "submit",
            "--no-wait",
            "--submission-id",
            submission_id,
            "--working-dir",
            ".",
            "--runtime-env-json",
            json.dumps(runtime_env),
            "--",
            *entrypoint,
            timeout=180,
            cwd=cwd,
        )
        if out.returncode != 0:
            raise RuntimeError(f"ray job submit failed:\n{out.stdout}{out.stderr}")

    def logs(self, submission_id: str, tail: int = 4000) -> str:
        """The end of a job's logs (for a failure message)."""
        out = self.job("logs", submission_id)
        return (out.stdout + out.stderr)[-tail:]

    def wait_job(self, submission_id: str, timeout: float) -> tuple[str, str]:
        """Follows the job's logs until it ends; returns (final status, logs)."""
        logs = self.job("logs", "--follow", submission_id, timeout=timeout).stdout
        status = self.job("status", submission_id)
        text = (status.stdout + status.stderr).lower()
        for word in ("succeeded", "failed", "stopped"):
            if word in text:
                return word.upper(), logs
        return text, logs


def wait_for(
    check: Callable[[], Any],
    timeout: float,
    what: str,
    every: float = 0.5,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Polls ``check`` until it returns something truthy; fails the test after ``timeout`` s
    (with what ``explain`` returns then, e.g. the job's logs)."""
    import pytest

    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    detail = ""
    if explain is not None:
        try:
            detail = f"\n{explain()}"
        except Exception as e:  # a failing explanation must not hide the timeout
            detail = f"\n(no explanation: {type(e).__name__}: {e})"
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{detail}")


def cluster_env() -> dict[str, str]:
    """The environment of every node and client: token auth with a fresh token, this venv's
    executables first on PATH (a job's entrypoint `memrl ...` resolves from the head's PATH)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=secrets.token_hex(32),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        RAY_USAGE_STATS_ENABLED="0",
        PYTHONUNBUFFERED="1",
    )
    return env


@contextlib.contextmanager
def local_cluster(prefix: str = "mrlc-") -> Iterator[LocalCluster]:
    """A LocalCluster whose nodes are all stopped (and temp dirs removed) on exit, even on error.

    The root is short on purpose: Ray's unix sockets live under it (108-byte limit).
    """
    cluster = LocalCluster(root=tempfile.mkdtemp(prefix=prefix), env=cluster_env())
    try:
        yield cluster
    finally:
        cluster.shutdown()
