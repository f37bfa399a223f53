"""WebShop at scale: catalogue load time and memory, index build, search and env speed, shopper.

Per catalogue size (one fresh process each, so memory figures do not mix), with a synthetic
catalogue written to disk first:

- ``gen_s`` / ``files_mb``: writing the three JSON files (``memrl data webshop``);
- ``load_s`` / ``load_rss_mb``: parsing and validating them (resident memory added);
- ``index_s`` / ``index_rss_mb``: building the BM25 index;
- ``search_p50_ms`` / ``search_p95_ms``: one uncached search (instruction keywords of goals);
- ``steps_per_s`` / ``resets_per_s``: ``memrl/WebShop-v0`` (MEM1 format, ``text`` pages) driven by
  the scripted shopper on one core, searches uncached;
- ``shopper_reward`` / ``shopper_success``: the scripted shopper on the test split.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

NAME = "webshop"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        default="1000,100000",
        help="comma-separated catalogue sizes (default: %(default)s; 1000000 "
        "takes ~13 min and ~12 GB of memory)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=5.0,
        help="time budget of the env-speed measurement (default: 5)",
    )
    parser.add_argument("--queries", type=int, default=300, help="searches timed (default: 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workdir", default=None, help="where to write catalogues (default: a temporary directory)"
    )
    add_output_arguments(parser, NAME)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def measure(size: int, seed: int, seconds: float, queries: int, workdir: str) -> dict[str, Any]:
    """All figures of one catalogue size (run in a fresh process)."""
    import gc
    import statistics
    import time
    from pathlib import Path

    from memrl.envs.webshop.catalogue import load_catalogue
    from memrl.envs.webshop.env import WebShopEnv
    from memrl.envs.webshop.generator import generate_catalogue
    from memrl.envs.webshop.shopper import ScriptedShopper, evaluate_shopper, instruction_keywords
    from memrl.envs.webshop.world import CatalogueSpec, WebShopWorld, register_world

    out = Path(workdir) / f"webshop_{size}_{seed}"
    t = time.perf_counter()
    paths = generate_catalogue(out, size, seed)
    gen_s = time.perf_counter() - t
    files_mb = sum(p.stat().st_size for p in paths.values()) / 1e6

    gc.collect()
    rss0 = _rss_mb()
    t = time.perf_counter()
    catalogue = load_catalogue(out, price_seed=seed)
    load_s = time.perf_counter() - t
    gc.collect()
    rss1 = _rss_mb()
    spec = CatalogueSpec(data_dir=str(out), num_products=None, seed=seed)
    world = WebShopWorld(spec, catalogue=catalogue)
    gc.collect()
    rss2 = _rss_mb()
    register_world(world)

    texts = [instruction_keywords(g["instruction_text"]) for g in world.goals[:queries]]
    latencies = []
    for q in texts:
        t = time.perf_counter()
        world.index._search(q, 50)
        latencies.append((time.perf_counter() - t) * 1e3)
    latencies.sort()

    env = WebShopEnv(data_dir=str(out), num_products=None, seed=seed, split="all", max_turns=10)
    shopper = ScriptedShopper(env.engine)
    steps = resets = 0
    start = time.perf_counter()
    episode = 0
    while time.perf_counter() - start < seconds:
        env.reset(options={"task_index": episode % len(env.task_indices)})
        episode += 1
        resets += 1
        done = False
        while not done:
            planned = shopper.plan(env.session)
            if not planned:
                break
            for action in planned:
                world.index._search_cached.cache_clear()
                turn = f"<think>plan</think><summary>shopping</summary><answer>{action}</answer>"
                _, _, term, trunc, _ = env.step(turn)
                steps += 1
                done = term or trunc
                if done:
                    break
    elapsed = time.perf_counter() - start
    reset_only = []
    for i in range(200):
        t = time.perf_counter()
        env.reset(options={"task_index": i % len(env.task_indices)})
        reset_only.append(time.perf_counter() - t)
    score = evaluate_shopper(world, "test")
    return {
        "products": size,
        "goals": world.num_goals(),
        "gen_s": gen_s,
        "files_mb": files_mb,
        "load_s": load_s,
        "load_rss_mb": rss1 - rss0,
        "index_s": world.timings["index_s"],
        "index_rss_mb": rss2 - rss1,
        "search_p50_ms": statistics.median(latencies),
        "search_p95_ms": latencies[int(0.95 * (len(latencies) - 1))],
        "steps_per_s": steps / elapsed,
        "episode_resets_per_s": resets / elapsed,
        "resets_per_s": len(reset_only) / sum(reset_only),
        "shopper_reward": score["avg_reward"],
        "shopper_success": score["success_rate"],
    }


def run(args: argparse.Namespace) -> int:
    import multiprocessing as mp
    import tempfile

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or tmp
        ctx = mp.get_context("spawn")
        for size in sizes:
            with ctx.Pool(1) as pool:
                rows.append(
                    pool.apply(measure, (size, args.seed, args.seconds, args.queries, workdir))
                )
    write_report(
        NAME,
        rows,
        args.output,
        as_json=args.json,
        title="WebShop: catalogue, index, search and env speed (one core) by catalogue size",
        plots=[
            Plot("products", "search_p50_ms", logx=True, title="search p50 (ms)"),
            Plot("products", "steps_per_s", logx=True, title="env steps/s (one core)"),
            Plot("products", "load_s", logx=True, logy=True, title="catalogue load (s)"),
            Plot("products", "index_s", logx=True, logy=True, title="index build (s)"),
            Plot("products", "load_rss_mb", logx=True, logy=True, title="catalogue memory (MB)"),
            Plot("products", "shopper_reward", logx=True, title="scripted shopper reward"),
        ],
    )
    return 0
