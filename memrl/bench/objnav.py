"""ObjNav-lite stepping speed: vectorized core at several batch sizes, the gym env, the worker.

Modes (one row each per batch size):

- ``vec``: ``ObjNavVec.step`` on N envs with uniformly random actions (trials end and new layouts
  are drawn inside the timed loop, as in training);
- ``gym``: ``ObjNavEnv.step`` one env at a time (batch 1), the path RLlib's env runner takes;
- ``worker``: ``HabitatEnv(backend="objnav")``, the same env behind the habitat worker protocol in a
  second process (batch 1): the cost of the IPC round trip.

``env_steps_per_s`` counts single-env steps (a vec step of N envs is N env steps) per wall-clock
second; ``env_steps_per_cpu_s`` per CPU second of this process, which is what one dedicated core
would give when the machine is shared (for ``worker`` it leaves out the worker's own CPU). numpy
runs the hot path without BLAS, so everything is single-threaded.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

NAME = "objnav"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch-sizes", default="1,16,64,256", help="comma-separated N for the vec mode"
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="time budget per measurement (default 3)"
    )
    parser.add_argument(
        "--trial-len", type=int, default=4096, help="steps per trial (default 4096, as training)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-worker", action="store_true", help="skip the worker-process (IPC) measurement"
    )
    add_output_arguments(parser, NAME)


def _time_loop(step, seconds: float, min_calls: int = 20) -> tuple[int, float, float]:
    """Calls step() for about ``seconds``; returns (calls, wall seconds, CPU seconds)."""
    calls = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    while True:
        for _ in range(min_calls):
            step()
        calls += min_calls
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls, elapsed, time.process_time() - cpu_start


def _bench_vec(batch: int, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from memrl.envs.objnav import ObjNavConfig, ObjNavVec

    vec = ObjNavVec(batch, ObjNavConfig(trial_len=args.trial_len, seed=args.seed))
    vec.reset()
    actions = np.random.default_rng(args.seed).integers(0, 4, size=(1024, batch))
    i = 0

    def step() -> None:
        nonlocal i
        vec.step(actions[i % 1024])
        i += 1

    calls, elapsed, cpu = _time_loop(step, args.seconds)
    return _row("vec", batch, calls * batch, elapsed, cpu)


def _bench_env(env: Any, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    env.reset(seed=args.seed)
    actions = np.random.default_rng(args.seed).integers(0, 4, size=1024).tolist()
    i = 0

    def step() -> None:
        nonlocal i
        _, _, terminated, truncated, _ = env.step(actions[i % 1024])
        if terminated or truncated:
            env.reset()
        i += 1

    calls, elapsed, cpu = _time_loop(step, args.seconds)
    return _row(mode, 1, calls, elapsed, cpu)


def _row(mode: str, batch: int, steps: int, seconds: float, cpu: float) -> dict[str, Any]:
    return {
        "mode": mode,
        "batch": batch,
        "env_steps": steps,
        "seconds": round(seconds, 3),
        "env_steps_per_s": steps / seconds,
        "env_steps_per_cpu_s": steps / max(cpu, 1e-9),
        "us_per_call": seconds / (steps / batch) * 1e6,
    }


def run(args: argparse.Namespace) -> int:
    from memrl.envs.objnav import ObjNavEnv

    try:
        batches = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    except ValueError as err:
        raise ValueError(
            f"--batch-sizes must be comma-separated ints, got {args.batch_sizes!r}"
        ) from err
    rows = [_bench_vec(b, args) for b in batches]
    env = ObjNavEnv(trial_len=args.trial_len, seed=args.seed)
    rows.append(_bench_env(env, "gym", args))
    if not args.no_worker:
        from memrl.envs.habitat import HabitatEnv

        worker_env = HabitatEnv(backend="objnav", task={"trial_len": args.trial_len})
        try:
            rows.append(_bench_env(worker_env, "worker", args))
        finally:
            worker_env.close()
    write_report(
        NAME,
        rows,
        args.output,
        plots=[
            Plot(
                x="batch",
                y="env_steps_per_s",
                group="mode",
                logx=True,
                logy=True,
                title="env steps per wall second",
            ),
            Plot(
                x="batch",
                y="env_steps_per_cpu_s",
                group="mode",
                logx=True,
                logy=True,
                title="env steps per CPU second (this process)",
            ),
        ],
        as_json=args.json,
        title="ObjNav-lite stepping speed",
    )
    return 0
