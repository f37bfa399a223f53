"""memrl's uvicorn servers against clients that hold connections without using them: real
sockets to a real retrieval server on 127.0.0.1 (idle and slow-header connections are closed,
keep-alive is bounded, a connection cap keeps /health answering), the same through
``memrl serve retrieval`` in a process whose descriptor limit is 256, and the web-search test
site on the same guards."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from memrl_testing import REPO

from memrl.envs.asgi import ASGIServer, bind
from memrl.envs.doc_qa import resources
from memrl.envs.retrieval.app import RetrievalApp
from memrl.envs.web_search.testsite import LocalSite


@pytest.fixture(scope="module")
def app():
    retriever = resources.synthetic_retriever(300, 0)
    return RetrievalApp(retriever, len(retriever.corpus), 30.0)


@pytest.fixture
def serve(app):
    started = []

    def start(**options) -> tuple[str, int]:
        server = ASGIServer(app, bind("127.0.0.1", 0), name="guard-test", **options).start()
        started.append(server)
        return server.address

    yield start
    for server in started:
        server.stop()


def _closed_after(sock: socket.socket, limit_s: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closes ``sock`` (None if still open after ``limit_s``),
    sending ``trickle`` one byte every 0.1 s meanwhile."""
    start = time.monotonic()
    sock.settimeout(0.1)
    sent = 0
    while time.monotonic() - start < limit_s:
        try:
            if sent < len(trickle):
                sock.send(trickle[sent : sent + 1])
                sent += 1
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start
    return None


def _health(address: tuple[str, int]) -> int:
    conn = http.client.HTTPConnection(*address, timeout=5)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    finally:
        conn.close()


def test_idle_and_slow_header_connections_are_closed(serve):
    address = serve(header_timeout_s=0.5)
    with socket.create_connection(address) as idle:
        assert 0.3 < _closed_after(idle, 5.0) < 2.0  # sent nothing at all
    with socket.create_connection(address) as slow:
        # A header a byte every 0.1 s: each byte would restart uvicorn's keep-alive timer.
        trickle = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
        assert 0.3 < _closed_after(slow, 5.0, trickle) < 2.0
    assert _health(address) == 200


def test_keep_alive_serves_requests_then_closes_when_idle(serve):
    address = serve(header_timeout_s=30.0, keep_alive_s=0.5)
    conn = http.client.HTTPConnection(*address, timeout=5)
    conn.request("GET", "/health")
    first = conn.getresponse()
    assert first.status == 200 and json.loads(first.read())["num_docs"] == 300
    conn.request("GET", "/health")  # the same connection, at once
    assert conn.getresponse().read() and conn.sock is not None
    assert 0.3 < _closed_after(conn.sock, 5.0) < 2.0
    conn.close()


def test_a_connection_cap_keeps_health_answering(serve):
    """30 connections that send nothing, with at most 8 open: each one over the cap closes the
    connection that has waited longest, and /health is answered at once."""
    address = serve(header_timeout_s=60.0, max_connections=8)
    idle = [socket.create_connection(address) for _ in range(30)]
    try:
        start = time.monotonic()
        assert _health(address) == 200
        assert time.monotonic() - start < 3.0
        closed = sum(_closed_after(sock, 0.3) is not None for sock in idle)
        assert 30 - 8 <= closed < 30  # the cap holds; connections under it stay open
    finally:
        for sock in idle:
            sock.close()


def test_timeouts_and_cap_are_checked():
    with pytest.raises(ValueError, match="max_connections >= 1"):
        ASGIServer(None, bind("127.0.0.1", 0), max_connections=0)


SERVE_WITH_FEW_DESCRIPTORS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from memrl.cli import main
sys.exit(main(["serve", "retrieval", "--synthetic", "300", "--port", "0"]))
"""


def test_serve_retrieval_under_a_descriptor_limit_survives_400_idle_connections():
    """The issue's case: a server process limited to 256 descriptors, 400 idle connections;
    /health must answer (the cap follows the limit: 128 connections)."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE_WITH_FEW_DESCRIPTORS],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    idle: list[socket.socket] = []
    try:
        line = server.stdout.readline()
        assert line.startswith("serving 300 passages on http://127.0.0.1:"), line
        port = int(line.split("127.0.0.1:")[1].split()[0])
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(400)]
        start = time.monotonic()
        deadline = start + 10.0
        status = 0
        while status != 200 and time.monotonic() < deadline:
            try:
                status = _health(("127.0.0.1", port))
            except OSError:
                time.sleep(0.2)
        assert status == 200 and time.monotonic() - start < 10.0
    finally:
        for sock in idle:
            sock.close()
        server.terminate()
        server.wait(timeout=20)


def test_the_test_site_cuts_off_dripping_clients_and_caps_connections():
    """The web-search test site (``memrl serve test-site``) on the same guards: a client that
    drips its header a byte every 0.1 s is closed at the header deadline, and 30 idle
    connections, with at most 8 open, hold no thread each and do not keep a page from answering."""
    with LocalSite(header_timeout_s=0.5, max_connections=8) as site:
        host, port = site.url.removeprefix("http://").split(":")
        address = (host, int(port))
        with socket.create_connection(address) as slow:
            trickle = b"GET /notes.txt HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
            closed_s = _closed_after(slow, 5.0, trickle)
            assert closed_s is not None and 0.3 < closed_s < 2.0, closed_s
        threads = threading.active_count()
        idle = [socket.create_connection(address) for _ in range(30)]
        try:
            conn = http.client.HTTPConnection(*address, timeout=5)
            conn.request("GET", "/notes.txt")
            assert b"Oren Vale" in conn.getresponse().read()
            conn.close()
            assert threading.active_count() - threads < 5
            closed = sum(_closed_after(sock, 0.3) is not None for sock in idle)
            assert 30 - 8 <= closed < 30  # the cap holds; connections under it stay open
        finally:
            for sock in idle:
                sock.close()
