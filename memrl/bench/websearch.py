"""Web-search env throughput: pages/s per browser and for a pool, start time, memory, cache speedup.

Everything runs against the local test site on 127.0.0.1 (``memrl.envs.web_search.testsite``), so
the figures measure the browser, the proxy, extraction and the cache, not the internet. A page
read includes the DOM-settle wait (``--settle-quiet-ms``, the env's default 500 ms), which
dominates on fast local pages.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pages", type=int, default=24, help="page reads per throughput run")
    parser.add_argument("--starts", type=int, default=3, help="browser starts to time")
    parser.add_argument(
        "--settle-quiet-ms",
        type=int,
        default=500,
        help="DOM quiet time that counts as settled (default: %(default)s, the env default)",
    )
    add_output_arguments(parser, "websearch")


def _tree_memory_mb(pids: set[int]) -> tuple[float, float]:
    """(RSS, PSS) of a process tree in MiB; PSS shares common pages fairly between processes."""
    import psutil

    rss = pss = 0
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except psutil.Error:
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return rss / 2**20, pss / 2**20


def _throughput(client: Any, urls: list[str], workers: int) -> tuple[float, int]:
    """Pages per second over ``urls`` with ``workers`` threads; returns (pages/s, errors)."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(client.open, urls))
    elapsed = time.perf_counter() - t0
    return len(urls) / elapsed, sum(bool(o.error) for o in outcomes)


def run(args: argparse.Namespace) -> int:
    from memrl.envs.web_search.browser import Browser
    from memrl.envs.web_search.config import (
        BrowserConfig,
        CacheConfig,
        FetchConfig,
        SafetyConfig,
        SearchConfig,
    )
    from memrl.envs.web_search.policy import UrlPolicy
    from memrl.envs.web_search.testsite import ARTICLES, LocalSite
    from memrl.envs.web_search.web_client import WebClient

    if args.pages < 2 or args.starts < 1:
        raise ValueError(f"--pages must be >= 2 and --starts >= 1, got {args.pages}, {args.starts}")
    safety = SafetyConfig(allow_hosts=("127.0.0.1",), allow_addresses=("127.0.0.1",))
    fetch = FetchConfig(min_host_interval_s=0.0, settle_quiet_ms=args.settle_quiet_ms)
    rows: list[dict[str, Any]] = []

    def row(metric: str, config: str, value: float, unit: str, **extra: Any) -> None:
        rows.append({"metric": metric, "config": config, "value": value, "unit": unit, **extra})

    with LocalSite() as site:
        paths = [f"/page/{name}" for name in ARTICLES] + ["/js", "/notes.txt"]
        urls = [site.url + paths[i % len(paths)] for i in range(args.pages)]
        search = SearchConfig(backend="html", options=site.search_options())

        starts, rss, pss = [], [], []
        for i in range(args.starts):
            browser = Browser(
                BrowserConfig(), fetch, UrlPolicy(safety), safety.max_page_bytes, name=f"bench-{i}"
            )
            t0 = time.perf_counter()
            browser.start()
            starts.append(time.perf_counter() - t0)
            browser.load(site.url + "/page/zorbania")
            mem = _tree_memory_mb(browser.pids())
            rss.append(mem[0])
            pss.append(mem[1])
            browser.close()
        for metric, values, unit in (
            ("browser_start_s", starts, "s"),
            ("memory_rss_mb", rss, "MiB"),
            ("memory_pss_mb", pss, "MiB"),
        ):
            row(
                metric,
                "1 browser",
                statistics.median(values),
                unit,
                n=args.starts,
                min=min(values),
                max=max(values),
            )

        for pool_size in (1, 2):
            client = WebClient(
                browser=BrowserConfig(pool_size=pool_size),
                safety=safety,
                fetch=fetch,
                cache=CacheConfig(mode="off"),
                search=search,
            )
            try:
                client.pool.start()
                _throughput(client, urls[:pool_size], pool_size)  # warm-up
                rate, errors = _throughput(client, urls, pool_size)
            finally:
                client.close()
            label = "1 browser" if pool_size == 1 else f"pool of {pool_size}"
            row("pages_per_s", label, rate, "pages/s", n=args.pages, errors=errors)

        with tempfile.TemporaryDirectory(prefix="memrl-bench-cache-") as cache_dir:
            client = WebClient(
                safety=safety,
                fetch=fetch,
                search=search,
                cache=CacheConfig(mode="readwrite", path=cache_dir),
            )
            try:
                client.pool.start()
                unique = list(dict.fromkeys(urls))
                cold, _ = _throughput(client, unique, 1)
                hot, _ = _throughput(client, unique, 1)
                t0 = time.perf_counter()
                client.search("capital of zorbania")
                search_cold = time.perf_counter() - t0
                t0 = time.perf_counter()
                client.search("capital of zorbania")
                search_hot = time.perf_counter() - t0
            finally:
                client.close()
            row("pages_per_s", "cache miss", cold, "pages/s", n=len(unique))
            row("pages_per_s", "cache hit", hot, "pages/s", n=len(unique))
            row("cache_hit_speedup", "page", hot / cold, "x", n=len(unique))
            row("cache_hit_speedup", "search", search_cold / search_hot, "x", n=1)

    write_report(
        "websearch",
        rows,
        args.output,
        plots=[Plot(x="config", y="value", facet="metric", kind="bar", logy=True)],
        as_json=args.json,
        title=f"Web search on the local test site (settle quiet {args.settle_quiet_ms} ms)",
        columns=["metric", "config", "value", "unit", "n", "min", "max", "errors"],
    )
    return 0
