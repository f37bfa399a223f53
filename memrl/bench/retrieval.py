"""Retrieval benchmark: BM25 build time and memory, queries/s and p50/p99 latency per access path.

For each corpus size (synthetic KB) it builds the BM25 index (time, index bytes, RSS growth),
saves it and reopens it memory-mapped, then times single-query calls three ways: in-process
(``LocalRetriever``), over HTTP (memrl's server on 127.0.0.1, keep-alive client) and through the
shared Ray service (named actor, ``RayRetriever``). Queries are what the scripted agent sends
(an entity name plus keywords). ``--pin-core`` keeps this process on one CPU core.

Example:
    memrl bench retrieval --sizes 10000 100000 --queries 2000
"""

from __future__ import annotations

import argparse

from memrl.experiment.tables import add_output_arguments

NAME = "retrieval"
MODES = ("in-process", "http", "ray")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[10_000, 100_000, 1_000_000],
        help="corpus sizes in passages (default: 10000 100000 1000000)",
    )
    parser.add_argument("--queries", type=int, default=2000, help="timed queries per mode")
    parser.add_argument("--topk", type=int, default=3, help="passages per query (default 3)")
    parser.add_argument(
        "--modes", nargs="+", default=list(MODES), choices=MODES, help="access paths to time"
    )
    parser.add_argument(
        "--pin-core", action="store_true", help="pin this process to one CPU core (Linux)"
    )
    parser.add_argument("--seed", type=int, default=0, help="KB and query seed")
    add_output_arguments(parser, NAME)


def _latencies(call, queries: list[str], topk: int) -> list[float]:
    import time

    for q in queries[:200]:  # warm page cache (mmap index), connections and the actor
        call([q], topk)
    out = []
    for q in queries:
        start = time.perf_counter()
        call([q], topk)
        out.append(time.perf_counter() - start)
    return out


def _queries(kb, n: int, seed: int) -> list[str]:
    import numpy as np

    from memrl.envs.doc_qa.kb_schema import RELATIONS, parse_question

    rng = np.random.default_rng(seed)
    questions = kb.sample_questions(n, rng, "train", multi_hop_fraction=0.0)
    out = []
    for q in questions:
        relations, subject = parse_question(q.question)
        out.append(f"{subject} {RELATIONS[relations[0]].keywords}")
    return out


def run(args: argparse.Namespace) -> int:
    import logging
    import os
    import tempfile
    import time
    from pathlib import Path

    import numpy as np
    import psutil

    from memrl.envs.doc_qa.synthetic import SyntheticKB
    from memrl.envs.retrieval.app import RetrievalServer
    from memrl.envs.retrieval.corpus import save_corpus
    from memrl.envs.retrieval.http import HTTPRetriever
    from memrl.envs.retrieval.local import LocalRetriever, build_index, load_index
    from memrl.experiment.tables import Plot, write_report

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    if args.pin_core and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    process = psutil.Process()
    rows = []
    ray_started = False
    with tempfile.TemporaryDirectory(prefix="memrl-bench-retrieval-") as tmp:
        for size in args.sizes:
            start = time.perf_counter()
            kb = SyntheticKB(size, args.seed)
            corpus = kb.corpus
            corpus_s = time.perf_counter() - start
            rss0 = process.memory_info().rss
            start = time.perf_counter()
            index = build_index(corpus, "bm25", show_progress=False)
            build_s = time.perf_counter() - start
            rss_build = (process.memory_info().rss - rss0) / 2**20
            folder = Path(tmp) / f"bm25-{size}"
            index.save(folder)
            corpus_path = save_corpus(corpus, Path(tmp) / f"corpus-{size}.parquet")
            index_mb = sum(f.stat().st_size for f in folder.iterdir()) / 2**20
            del index
            start = time.perf_counter()
            loaded = load_index(folder)
            load_s = time.perf_counter() - start
            local = LocalRetriever(corpus, loaded)
            queries = _queries(kb, args.queries, args.seed + 1)
            base = {
                "passages": size,
                "corpus_s": corpus_s,
                "build_s": build_s,
                "build_rss_mb": rss_build,
                "index_mb": index_mb,
                "load_s": load_s,
            }
            p50_local = None
            for mode in args.modes:
                if mode == "in-process":
                    lat = _latencies(local.retrieve, queries, args.topk)
                elif mode == "http":
                    with RetrievalServer(local, "127.0.0.1", 0, num_docs=size) as server:
                        lat = _latencies(HTTPRetriever(server.url).retrieve, queries, args.topk)
                else:
                    import ray

                    from memrl.envs.retrieval.service import (
                        RayRetriever,
                        start_retrieval_service,
                    )

                    if not ray_started:
                        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
                        ray_started = True
                    name = f"bench_retrieval_{size}"
                    handle = start_retrieval_service(
                        {"corpus": str(corpus_path), "index": str(folder)}, name=name
                    )
                    lat = _latencies(RayRetriever(name).retrieve, queries, args.topk)
                    ray.kill(handle)
                lat_ms = np.asarray(lat) * 1000
                p50 = float(np.percentile(lat_ms, 50))
                if mode == "in-process":
                    p50_local = p50
                rows.append(
                    {
                        **base,
                        "mode": mode,
                        "qps": float(1000 / lat_ms.mean()),
                        "p50_ms": p50,
                        "p99_ms": float(np.percentile(lat_ms, 99)),
                        "overhead_p50_ms": (p50 - p50_local) if p50_local is not None else None,
                    }
                )
            del local, loaded, kb, corpus
    if ray_started:
        import ray

        ray.shutdown()
    write_report(
        NAME,
        rows,
        args.output,
        plots=[
            Plot(x="passages", y="p50_ms", group="mode", logx=True, title="p50 latency"),
            Plot(x="passages", y="p99_ms", group="mode", logx=True, title="p99 latency"),
            Plot(x="passages", y="qps", group="mode", logx=True, logy=True, title="queries/s"),
            Plot(x="passages", y="build_s", logx=True, logy=True, title="BM25 build time"),
        ],
        as_json=args.json,
        title=f"BM25 retrieval, top-{args.topk}, {args.queries} single-query calls per mode",
    )
    return 0
