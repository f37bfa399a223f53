"""The ``/retrieve`` wire format stays byte for byte what memrl's first server sent.

``data/retrieve_golden.json`` was recorded from the standard-library server (commit ee0e8d1) over
the synthetic KB of 300 passages, seed 0: each case holds the request, the status, the
Content-Type and the exact response body. Any server memrl ships must answer the same bytes.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from memrl.envs.doc_qa import resources
from memrl.envs.retrieval.app import RetrievalServer

GOLDEN = json.loads((Path(__file__).parent / "data" / "retrieve_golden.json").read_text())


def raw_exchange(url: str, method: str, path: str, body: bytes) -> tuple[int, dict, bytes]:
    """One request on a fresh connection; returns (status, headers, body bytes)."""
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_bytes, _, payload = data.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, payload


@pytest.fixture(scope="module")
def server():
    spec = GOLDEN["retriever"]
    local = resources.synthetic_retriever(spec["synthetic_passages"], spec["seed"])
    with RetrievalServer(local, "127.0.0.1", 0, num_docs=spec["synthetic_passages"]) as srv:
        yield srv


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: f"{c['method']} {c['path']}")
def test_responses_match_the_recorded_bytes(server, case):
    body = b"" if case["request"] is None else json.dumps(case["request"]).encode()
    status, headers, payload = raw_exchange(server.url, case["method"], case["path"], body)
    assert status == case["status"]
    assert headers["content-type"] == case["content_type"]
    assert int(headers["content-length"]) == len(payload)
    assert payload == case["response"].encode("utf-8")


@pytest.mark.slow
def test_the_ray_serve_application_answers_the_same_bytes():
    """``serve_app`` on a local Ray: Serve's proxy in front, the same app behind it."""
    ray = pytest.importorskip("ray")
    from ray import serve

    from memrl.envs.retrieval.http import HTTPRetriever
    from memrl.envs.retrieval.serve_app import app_builder

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = {key: str(value) for key, value in GOLDEN["retriever"].items()}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(app_builder(spec), name="retrieval", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        for case in GOLDEN["cases"]:
            body = b"" if case["request"] is None else json.dumps(case["request"]).encode()
            status, headers, payload = raw_exchange(url, case["method"], case["path"], body)
            assert (status, headers["content-type"]) == (case["status"], case["content_type"])
            assert payload == case["response"].encode("utf-8"), case
        local = resources.synthetic_retriever(300, 0)
        queries = [local.corpus[i].title + " city" for i in (0, 7)]
        assert HTTPRetriever(url).retrieve(queries, 3) == local.retrieve(queries, 3)
    finally:
        serve.shutdown()
        ray.shutdown()
