"""Shared test helpers: tiny experiment configs and a runner for the real `memrl` CLI."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

TINY = {
    "name": "tiny",
    "env": {
        "id": "memrl/DarkKeyToDoor-v0",
        "config": {"size": 4, "episode_len": 10, "trial_len": 40},
    },
    "algorithm": {"name": "ppo", "train_batch_size": 400, "minibatch_size": 200, "num_epochs": 1},
    "model": {"type": "mlp", "hiddens": [16]},
    "resources": {"num_env_runners": 1, "num_envs_per_env_runner": 2},
    "run": {"stop_iters": 2, "checkpoint_every": 1},
}


TINY_MEMO = {
    "type": "memo",
    "d_model": 16,
    "n_layers": 1,
    "n_heads": 2,
    "l_seg": 8,
    "l_sum": 2,
    "encoder_hiddens": [16],
}
"""A Memo model small enough for one-iteration RLlib tests (merge what a test varies)."""


def write_config(path: Path, data: dict[str, Any] | None = None, **overrides: Any) -> Path:
    """Writes TINY (or data) with top-level sections updated from overrides."""
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in (data or TINY).items()}
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


def memrl_cli(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs `python -m memrl ARGS` as a user would, capturing its output."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "memrl", *args],
        cwd=cwd or REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_error_line(capsys: Any, *argv: str) -> str:
    """Runs the CLI in this process; asserts exit code 2 and one ``error:`` line on stderr, soon
    and without a traceback; returns that line."""
    from memrl.cli import main

    start = time.monotonic()
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and time.monotonic() - start < 30
    return err


def memrl_background(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Starts `python -m memrl ARGS` in the background, in a session of its own (so a test can
    signal it, or kill its whole process group), with stdout and stderr together in one pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "memrl", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def bulk_config(
    sampler: str,
    model: dict[str, Any],
    *,
    envs: int,
    steps: int,
    minibatch: int,
    seed: int,
    env: dict[str, Any] | None = None,
    **resources: Any,
) -> Any:
    """The RLlib AlgorithmConfig of a small Dark-Key-To-Door PPO experiment (4x4 grid, 30-step
    trials of 6-step inner episodes; ``env`` replaces the env section) on ``sampler``'s path."""
    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.config import parse_config

    exp = parse_config(
        {
            "env": env or {"config": {"size": 4, "episode_len": 6, "trial_len": 30}},
            "model": model,
            "algorithm": {"name": "ppo", "train_batch_size": steps, "minibatch_size": minibatch},
            "resources": {"num_envs_per_env_runner": envs, "sampler": sampler, **resources},
            "run": {"seed": seed},
        }
    )
    return build_algorithm_config(exp)


def learner_for(config: Any, runner: Any) -> Any:
    """The learner ``config`` builds for the spaces of ``runner``'s env."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    spaces = {
        DEFAULT_MODULE_ID: (runner.env.single_observation_space, runner.env.single_action_space)
    }
    return config.build_learner(spaces=spaces)


def trial_chunks(rollout: Any) -> list[tuple[int, int, int]]:
    """(env, first row, end row) of each trial chunk of a bulk rollout, in the order RLlib's env
    runner returns its episodes: trials that ended, by step and env, then the ongoing ones by
    env."""
    steps, envs = rollout.valid.shape
    done, start = [], [None] * envs
    for t in range(steps):
        for n in range(envs):
            if not rollout.valid[t, n]:
                continue
            if start[n] is None:
                start[n] = t
            if rollout.terminated[t, n] or rollout.truncated[t, n]:
                done.append((n, start[n], t + 1))
                start[n] = None
    return done + [(n, s, steps) for n, s in enumerate(start) if s is not None]


_FORK_SCRIPT = """
import pickle, sys
import torch.multiprocessing as mp
with open(sys.argv[1], "rb") as f:
    fn, args, nprocs = pickle.load(f)
mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="fork")
"""


def start_forked_processes(
    fn: Any, args: tuple, nprocs: int, workdir: Path, timeout: float = 300
) -> None:
    """``torch.multiprocessing.start_processes(fn, args, nprocs, start_method="fork")``, forked
    from a fresh interpreter instead of the test process.

    Late in a suite the test process holds dozens of threads of earlier tests (gRPC, Ray's GCS
    client, a jemalloc background thread); a child forked from it copies their state mid-operation
    and can abort ("double free or corruption"). ``fn`` and ``args`` travel by value (the test
    modules and conftests they come from are not importable in the new interpreter); a failing
    child, or one still running after ``timeout`` seconds, fails the calling test with its output.
    """
    import cloudpickle

    tests = REPO / "tests"
    modules = [
        m for m in list(sys.modules.values())
        if Path(getattr(m, "__file__", None) or "/").resolve().is_relative_to(tests)
    ]  # fmt: skip
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        payload = cloudpickle.dumps((fn, args, nprocs))
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)
    path = workdir / "forked_processes.pkl"
    path.write_bytes(payload)
    # Its own session: on a timeout the forked children (stuck in a collective) go with it.
    proc = subprocess.Popen(
        [sys.executable, "-c", _FORK_SCRIPT, str(path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tests}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(f"still running after {timeout} s: {stderr[-4000:]}") from None
    assert proc.returncode == 0, stdout[-2000:] + stderr[-4000:]


def cxx_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU kernels would use ($CXX, g++ or c++), or None."""
    return shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")


needs_cxx = pytest.mark.skipif(
    cxx_compiler() is None,
    reason="compile_learner needs a C++ compiler on CPUs (torch.compile's inductor); none found",
)
"""Marks a test that runs ``model.compile_learner`` on a CPU (make test installs g++)."""
