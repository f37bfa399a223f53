"""Memo vs RMT vs FCT inference: per-step latency and KV-cache bytes per env as trials grow.

For each mode and trial length t, the cache is brought to the state it has after t steps (its
token counts exactly as stepping would leave them, K/V filled with random values: the cost of a
step depends on the cache's size, not its contents), then ``step`` is timed over the next steps.
All envs of a batch hold the same counts (lockstep, as when their trials started together).
Memo and RMT are timed over one whole segment (l_seg steps, so the segment-end summary pass is
included in the mean); FCT over ``--fct-steps`` steps (its cost per step does not vary within a
segment). ``step_ms`` is wall time, ``step_cpu_ms`` the timing thread's CPU time. Default: the
paper's model (4 layers, 8 heads, d_model 256, l_seg 256, l_sum 32).
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

NAME = "memo-memory"
logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--modes",
        default="memo,rmt,fct",
        help="comma-separated: memo, rmt, fct, memo-stream (memo with --stream-blocks summaries)",
    )
    parser.add_argument(
        "--stream-blocks",
        type=int,
        default=32,
        help="memo-stream: summary blocks kept (32 x l_sum 32 = the paper's ~1024 tokens)",
    )
    parser.add_argument(
        "--t",
        default="512,1024,2048,4096,8192,16384,32768",
        help="comma-separated trial lengths (steps already in the cache)",
    )
    parser.add_argument("--batch", default="1,32", help="comma-separated numbers of envs")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--n-layers", type=int, default=4)
    parser.add_argument("--n-heads", type=int, default=8)
    parser.add_argument("--l-seg", type=int, default=256)
    parser.add_argument("--l-sum", type=int, default=32)
    parser.add_argument(
        "--fct-steps", type=int, default=32, help="steps timed per FCT point (default: %(default)s)"
    )
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--max-cache-gb",
        type=float,
        default=6.0,
        help="skip points whose K/V for the whole batch exceeds this",
    )
    add_output_arguments(parser, NAME)


def _fill(net: Any, batch: int, t: int, extra: int) -> Any:
    """A cache in the state it has after t steps (random K/V), with room for ``extra`` more.

    Every env holds the same counts (lockstep), as when all envs started their trials together.
    """
    import torch

    cfg = net.cfg
    cache = net.init_cache(batch)
    dev = cache.kv.device
    shape = (cfg.n_layers, 2, batch, cfg.n_heads)
    if cfg.mode == "fct":
        room = t + extra if cfg.fct_window is None else cfg.fct_window
        cache.kv = torch.randn(*shape, room, cfg.head_dim, device=dev)
        cache.t[:] = t
        return cache
    blocks = t // cfg.l_seg
    if cfg.summary_cap is not None:
        blocks = min(blocks, cfg.summary_cap)
    n = blocks * cfg.l_sum
    # Summary tokens after the extra steps (their segment ends) plus a segment and summary slots.
    most = n + cfg.l_sum * (extra // cfg.l_seg + 2)
    if cfg.summary_cap is not None:
        most = cfg.summary_cap * cfg.l_sum
    # The layout of MemoCache.kv: each row holds [summaries | current segment].
    cache.kv = torch.randn(*shape, most + cfg.l_seg + cfg.l_sum, cfg.head_dim, device=dev)
    cache.sum_x = torch.randn(batch, most, cfg.d_model, device=dev)
    cache.n_sum[:] = n
    cache.seg_len[:] = t % cfg.l_seg
    return cache


def measure(mode: str, t: int, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from memrl.methods.memo.network import MemoConfig, MemoTransformer

    cfg = MemoConfig(
        d_model=args.d_model,
        n_layers=args.n_layers,
        n_heads=args.n_heads,
        l_seg=args.l_seg,
        l_sum=args.l_sum,
        mode="memo" if mode == "memo-stream" else mode,
        max_summaries=args.stream_blocks if mode == "memo-stream" else None,
    )
    torch.manual_seed(0)
    net = MemoTransformer(cfg).to(args.device).eval()
    steps = args.fct_steps if mode == "fct" else cfg.l_seg
    cache = _fill(net, batch, t, steps + 1)
    row = {
        "mode": mode,
        "t": t,
        "batch": batch,
        "cache_tokens": net.cache_tokens(cache),
        "cache_bytes": net.cache_bytes(cache),
    }
    x = torch.randn(steps + 2, batch, cfg.d_model, device=args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    net.step(x[0], cache)  # warm-up (one step past t; the timed steps follow)
    sync()
    start, cpu = time.perf_counter(), time.thread_time()
    for i in range(steps):
        net.step(x[i + 1], cache)
    sync()
    row["step_ms"] = (time.perf_counter() - start) / steps * 1e3
    # CPU time of this thread: on a shared machine it leaves out the time the process waited.
    row["step_cpu_ms"] = (time.thread_time() - cpu) / steps * 1e3
    row["timed_steps"] = steps
    return row


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    ts = [int(v) for v in args.t.split(",")]
    batches = [int(v) for v in args.batch.split(",")]
    unknown = sorted(set(modes) - {"memo", "rmt", "fct", "memo-stream"})
    if unknown:
        raise ValueError(f"--modes: unknown {unknown}; use memo, rmt, fct, memo-stream")
    elem = 4
    rows = []
    for batch in batches:
        for t in ts:
            for mode in modes:
                tokens = t if mode == "fct" else t // args.l_seg * args.l_sum + args.l_seg
                gb = tokens * args.n_layers * 2 * args.d_model * elem * batch / 1e9
                if gb > args.max_cache_gb:
                    logger.warning(
                        "skipping %s t=%d batch=%d: %.1f GB of K/V > --max-cache-gb",
                        mode,
                        t,
                        batch,
                        gb,
                    )
                    continue
                rows.append(measure(mode, t, batch, args))
                logger.info("%s", rows[-1])
    fct = {(r["t"], r["batch"]): r for r in rows if r["mode"] == "fct"}
    for r in rows:
        ref = fct.get((r["t"], r["batch"]))
        r["bytes_vs_fct"] = r["cache_bytes"] / ref["cache_bytes"] if ref else float("nan")
        r["speedup_vs_fct"] = ref["step_ms"] / r["step_ms"] if ref else float("nan")
        r["cpu_speedup_vs_fct"] = ref["step_cpu_ms"] / r["step_cpu_ms"] if ref else float("nan")
    write_report(
        NAME,
        rows,
        args.output,
        as_json=args.json,
        title=f"Memo/RMT/FCT per-step inference on {args.device} "
        f"({args.n_layers} layers, d_model {args.d_model}, l_seg {args.l_seg}, "
        f"l_sum {args.l_sum})",
        plots=[
            Plot(x="t", y="step_ms", group="mode", facet="batch", logx=True, logy=True),
            Plot(
                x="t",
                y="cache_bytes",
                group="mode",
                logx=True,
                logy=True,
                title="K/V bytes per env",
            ),
        ],
    )
    return 0
