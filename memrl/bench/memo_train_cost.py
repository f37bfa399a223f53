"""Memo vs FCT training cost: learner time and peak memory per trial, and sampling speed.

Part 1 (``learner``): one loss pass (forward + backward of the whole trial, as the learner runs it)
over a ``--trial-len``-step trial (default 4096, the paper's) with the paper's model, for each mode;
each mode runs in a fresh process so its peak resident memory (minus the memory before the pass)
is its own. Part 2 (``sampling``, with ``--parts learner,sampling``): env steps per second of
RLlib's env runner on Dark-Key-To-Door with the Memo module and with RLlib's MLP (same vector-env
count, one torch thread).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import time
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

NAME = "memo-train-cost"
logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modes", default="memo,fct", help="comma-separated modes")
    parser.add_argument("--trial-len", type=int, default=4096)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--n-layers", type=int, default=4)
    parser.add_argument("--n-heads", type=int, default=8)
    parser.add_argument("--l-seg", type=int, default=256)
    parser.add_argument("--l-sum", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--parts",
        default="learner",
        help="comma-separated: learner (per-trial loss pass), sampling (RLlib env runner speed; "
        "starts a local Ray)",
    )
    parser.add_argument(
        "--sample-steps", type=int, default=4000, help="env steps timed per sampling measurement"
    )
    add_output_arguments(parser, NAME)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _learner_pass(spec: dict[str, Any], out: Any) -> None:
    import resource

    import torch

    from memrl.methods.memo.network import MemoConfig, MemoTransformer

    torch.set_num_threads(spec.pop("threads"))
    trial_len = spec.pop("trial_len")
    torch.manual_seed(0)
    net = MemoTransformer(MemoConfig(**spec)).train()
    x = torch.randn(1, trial_len, spec["d_model"])
    base = _rss_mb()
    start = time.perf_counter()
    y = net(x, layer_drop=False)
    forward_s = time.perf_counter() - start
    y.pow(2).mean().backward()
    total_s = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    out.put({"forward_s": forward_s, "learner_s": total_s, "peak_mb": peak - base})


def learner_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    rows = []
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        spec = dict(
            d_model=args.d_model,
            n_layers=args.n_layers,
            n_heads=args.n_heads,
            l_seg=args.l_seg,
            l_sum=args.l_sum,
            mode=mode,
            threads=args.threads,
            trial_len=args.trial_len,
        )
        queue = ctx.Queue()
        proc = ctx.Process(target=_learner_pass, args=(spec, queue))
        proc.start()
        result = queue.get()
        proc.join()
        rows.append({"part": "learner", "mode": mode, "trial_len": args.trial_len, **result})
        logger.info("%s", rows[-1])
    return rows


def sampling_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    import ray

    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.config import parse_config

    base = {
        "env": {
            "id": "memrl/DarkKeyToDoor-v0",
            "config": {"size": 5, "episode_len": 20, "trial_len": 100},
        },
        "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 8},
    }
    models = {
        "memo": {
            "type": "memo",
            "d_model": 64,
            "n_layers": 2,
            "n_heads": 4,
            "l_seg": 20,
            "l_sum": 4,
        },
        "mlp": {"type": "mlp"},
    }
    rows = []
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        for name, model in models.items():
            algo = build_algorithm_config(parse_config({**base, "model": model})).build_algo()
            runner = algo.env_runner
            runner.sample(num_timesteps=200, explore=True)  # warm-up
            start = time.perf_counter()
            runner.sample(num_timesteps=args.sample_steps, explore=True)
            elapsed = time.perf_counter() - start
            rows.append(
                {"part": "sampling", "mode": name, "env_steps_per_s": args.sample_steps / elapsed}
            )
            logger.info("%s", rows[-1])
            algo.stop()
    finally:
        if started:
            ray.shutdown()
    return rows


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"learner", "sampling"}
    if unknown:
        raise ValueError(f"--parts takes learner and/or sampling, got {sorted(unknown)}")
    rows = learner_rows(args) if "learner" in parts else []
    if "sampling" in parts:
        rows += sampling_rows(args)
    write_report(
        NAME,
        rows,
        args.output,
        as_json=args.json,
        title=f"Training cost per {args.trial_len}-step trial ({args.n_layers} layers, "
        f"d_model {args.d_model}, l_seg {args.l_seg}, l_sum {args.l_sum}); sampling speed",
        plots=[
            Plot(x="mode", y="learner_s", kind="bar", title="learner seconds per trial"),
            Plot(x="mode", y="peak_mb", kind="bar", title="peak memory (MiB) per trial"),
        ],
    )
    return 0
