"""Bounded load on 127.0.0.1: 2000 requests from 8 clients to each HTTP service, no errors.

Each client is a thread with one keep-alive connection. Latencies are reported (log line and
``record_property``: p50, p99, max in ms), never asserted: the machine is shared.
"""

from __future__ import annotations

import http.client
import logging
import threading
import time

import numpy as np
import pytest

from memrl.envs.doc_qa import resources
from memrl.envs.retrieval.app import RetrievalServer
from memrl.envs.retrieval.http import HTTPRetriever
from memrl.envs.webshop import CatalogueSpec, WebShopEngine, get_world
from memrl.envs.webshop.site import WebShopSite, start_server

logger = logging.getLogger(__name__)

REQUESTS = 2000
CLIENTS = 8


def _run_load(request_fn, record_property, name: str) -> None:
    """Runs REQUESTS calls of ``request_fn(client, i)`` over CLIENTS threads; 0 errors allowed."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        state: dict = {}
        for i in range(c, REQUESTS, CLIENTS):
            t0 = time.perf_counter()
            try:
                request_fn(state, i)
            except Exception as err:  # every failure is counted, none is hidden
                with lock:
                    errors.append(f"{type(err).__name__}: {err}")
                continue
            with lock:
                latencies.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    ms = np.array(latencies) * 1000
    p50, p99 = np.percentile(ms, [50, 99]) if len(ms) else (float("nan"),) * 2
    logger.info(
        "%s: %d requests, %d clients, %d errors, %.0f req/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms",
        name, REQUESTS, CLIENTS, len(errors), REQUESTS / seconds, p50, p99, ms.max(initial=0),
    )  # fmt: skip
    for key, value in (("p50_ms", p50), ("p99_ms", p99), ("errors", len(errors))):
        record_property(f"{name}_{key}", round(float(value), 2))
    assert errors == [] and len(latencies) == REQUESTS


@pytest.fixture(scope="module")
def retriever():
    return resources.synthetic_retriever(1000, 0)


def test_retrieval_service_under_load(retriever, record_property):
    titles = [retriever.corpus[i].title for i in range(0, 1000, 7)]
    expected = {t: retriever.retrieve([t + " born"], 3)[0] for t in titles}
    with RetrievalServer(retriever, "127.0.0.1", 0, num_docs=1000) as server:

        def request(state: dict, i: int) -> None:
            client = state.setdefault("client", HTTPRetriever(server.url, retries=0))
            title = titles[i % len(titles)]
            if client.retrieve([title + " born"], 3)[0] != expected[title]:
                raise AssertionError(f"wrong hits for {title!r}")

        _run_load(request, record_property, "retrieval")


def test_webshop_site_under_load(record_property):
    world = get_world(CatalogueSpec(num_products=300, seed=0))
    site = WebShopSite(WebShopEngine(world), world.split("all"))
    sessions = [site.new_session(i) for i in range(CLIENTS)]
    server = start_server(site, "127.0.0.1", 0)
    try:
        host, port = server.address

        def request(state: dict, i: int) -> None:
            conn = state.setdefault("conn", http.client.HTTPConnection(host, port, timeout=30))
            conn.request("GET", f"/s/{sessions[i % CLIENTS]}")
            response = conn.getresponse()
            page = response.read()
            if response.status != 200 or b"id='search_input'" not in page:
                raise AssertionError(f"status {response.status}")

        _run_load(request, record_property, "webshop")
    finally:
        server.stop()
