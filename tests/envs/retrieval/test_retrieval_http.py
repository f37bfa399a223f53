"""The Search-R1 HTTP protocol: memrl's server on 127.0.0.1, its client, and bad requests."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memrl.envs.doc_qa import DocQAEnv, resources
from memrl.envs.doc_qa.agent import ScriptedAgent, run_episode
from memrl.envs.retrieval.app import RetrievalServer
from memrl.envs.retrieval.http import HTTPRetriever


@pytest.fixture(scope="module")
def local():
    return resources.synthetic_retriever(300, 0)


@pytest.fixture(scope="module")
def server(local):
    with RetrievalServer(local, "127.0.0.1", 0, num_docs=300) as srv:
        yield srv


def _post(url, body: bytes, path="/retrieve", method="POST"):
    request = urllib.request.Request(
        url + path, data=body, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_protocol_shapes_with_and_without_scores(server, local):
    query = local.corpus[0].title + " born"
    status, body = _post(
        server.url,
        json.dumps({"queries": [query, "zzz unknown"], "topk": 2, "return_scores": True}).encode(),
    )
    assert status == 200 and len(body["result"]) == 2
    first = body["result"][0][0]
    assert set(first) == {"document", "score"} and set(first["document"]) == {"id", "contents"}
    expected = local.retrieve([query], 2)[0][0]
    assert first["document"]["contents"] == f'"{expected.title}"\n{expected.text}'
    assert first["score"] == pytest.approx(expected.score)
    assert body["result"][1] == []
    status, body = _post(server.url, json.dumps({"queries": [query]}).encode())
    entry = body["result"][0][0]
    assert set(entry) == {"id", "contents"} and len(body["result"][0]) == 3  # default topk 3


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "not valid UTF-8 JSON"),
        (b"\xff\xfe", 400, "not valid UTF-8 JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"queries": "one string"}', 400, "list of strings"),
        (b'{"queries": [1, 2]}', 400, "list of strings"),
        (b'{"topk": 3}', 400, "list of strings"),
        (b'{"queries": ["a"], "topk": 0}', 400, "topk"),
        (b'{"queries": ["a"], "topk": 100000}', 400, "topk"),
        (b'{"queries": ["a"], "topk": "3"}', 400, "topk"),
        (b'{"queries": ["a"], "topk": true}', 400, "topk"),
        (b'{"queries": ["a"], "return_scores": "yes"}', 400, "return_scores"),
        (json.dumps({"queries": ["q"] * 5000}).encode(), 413, "at most"),
    ],
)
def test_malformed_requests_get_4xx_json(server, body, status, message):
    got_status, got = _post(server.url, body)
    assert got_status == status and message in got["error"]


def test_routes_methods_and_raw_http_errors(server):
    assert _post(server.url, b"{}", path="/search")[0] == 404
    assert _post(server.url, b"{}", method="PUT")[0] == 405
    with urllib.request.urlopen(server.url + "/health", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok", "num_docs": 300}
    host, port = server.url[len("http://") :].split(":")
    for request, code in [
        (b"POST /retrieve HTTP/1.1\r\nHost: x\r\n\r\n", b" 411 "),
        (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n", b" 413 "),
        (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", b" 400 "),
    ]:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(request)
            assert code in sock.recv(4096).split(b"\r\n")[0]
    # The server is still serving after all of that.
    assert _post(server.url, b'{"queries": ["x"]}')[0] == 200


def test_client_matches_in_process_and_reports_errors(server, local):
    client = HTTPRetriever(server.url)
    queries = [local.corpus[i].title + " city" for i in (0, 50, 299)]
    assert client.retrieve(queries, 3) == local.retrieve(queries, 3)
    assert HTTPRetriever(server.url + "/retrieve").retrieve(queries[:1], 1) == local.retrieve(
        queries[:1], 1
    )
    with pytest.raises(ValueError, match="answered 400"):
        client.post({"queries": "not a list"})
    with pytest.raises(ValueError, match="http"):
        HTTPRetriever("ftp://127.0.0.1:1")


def test_client_reports_an_unreachable_server():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = HTTPRetriever(f"http://127.0.0.1:{port}", timeout=2, retries=1)
    with pytest.raises(ConnectionError, match="unreachable after 2 attempts"):
        client.retrieve(["x"], 3)


class _ForeignHandler(BaseHTTPRequestHandler):
    """A Search-R1-style server that ignores return_scores and sends bare documents."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        result = [
            [{"id": "7", "contents": f'"Title {q}"\nBody of {q}'}] for q in payload["queries"]
        ]
        body = json.dumps({"result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_client_speaks_to_a_foreign_server():
    foreign = ThreadingHTTPServer(("127.0.0.1", 0), _ForeignHandler)
    thread = threading.Thread(target=foreign.serve_forever, daemon=True)
    thread.start()
    try:
        client = HTTPRetriever(f"http://127.0.0.1:{foreign.server_address[1]}")
        (hit,), (hit2,) = client.retrieve(["a", "b"], 3)
        assert (hit.id, hit.title, hit.text) == ("7", "Title a", "Body of a")
        assert math.isnan(hit.score) and hit2.title == "Title b"
    finally:
        foreign.shutdown()
        foreign.server_close()


class _Broken:
    corpus = ()

    def retrieve(self, queries, topk):
        raise RuntimeError("disk on fire")


def test_retriever_fault_is_a_500_and_the_server_survives():
    with RetrievalServer(_Broken(), "127.0.0.1", 0) as srv:
        status, body = _post(srv.url, b'{"queries": ["x"]}')
        assert status == 500 and "disk on fire" in body["error"]
        assert _post(srv.url, b'{"queries": []}') == (200, {"result": []})


def test_env_over_http_with_the_scripted_agent(server):
    env = DocQAEnv(synthetic_passages=300, retriever="http", retrieval_url=server.url, num_tasks=20)
    results = [run_episode(env, ScriptedAgent(), options={"task_index": i}) for i in range(20)]
    assert sum(r["em"] == 2 for r in results) >= 18


def test_serve_command_on_a_free_port():
    proc = subprocess.Popen(
        [sys.executable, "-m", "memrl", "serve", "retrieval", "--synthetic", "300", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "serving 300 passages on http://127.0.0.1:" in line, line
        url = line.split(" on ")[1].split()[0]
        hits = HTTPRetriever(url).retrieve(["capital"], 2)
        assert len(hits) == 1 and 1 <= len(hits[0]) <= 2
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _raw(url: str, data: bytes, timeout: float = 20) -> bytes:
    """Sends raw bytes; returns everything the server answers before it closes."""
    host, port = url[len("http://") :].split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_deeply_nested_json_is_a_400_not_a_dropped_connection(server):
    body = b'{"queries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, got = _post(server.url, body)
    assert status == 400 and "nested too deeply" in got["error"]
    assert _post(server.url, b'{"queries": ["x"]}')[0] == 200


def test_head_and_options_are_answered(server):
    head = _raw(server.url, b"HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")  # headers only
    request = b"OPTIONS /retrieve HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    options = _raw(server.url, request)
    assert options.startswith(b"HTTP/1.1 204 ") and b"allow: post, options" in options.lower()


def test_a_short_body_times_out_with_408(local):
    with RetrievalServer(local, "127.0.0.1", 0, body_timeout_s=1.0) as srv:
        head = b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        answer = _raw(srv.url, head + b'{"queries"')
        assert answer.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s" in answer
        assert _post(srv.url, b'{"queries": ["x"]}')[0] == 200


def test_a_port_in_use_or_out_of_range_is_a_clear_error(server, local):
    port = int(server.url.rsplit(":", 1)[1])
    with pytest.raises(ValueError, match=f"Cannot listen on 127.0.0.1:{port}: the port is in use"):
        RetrievalServer(local, "127.0.0.1", port)
    with pytest.raises(ValueError, match=r"--port must be an int in \[0, 65535\]"):
        RetrievalServer(local, "127.0.0.1", 70000)


class _SurrogateHandler(_ForeignHandler):
    """A server whose passages carry a lone surrogate (legal as a JSON escape)."""

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        result = [[{"id": "1", "contents": '"T"\nlone \ud800 here'}] for _ in payload["queries"]]
        body = json.dumps({"result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_passages_with_lone_surrogates_reach_the_agent_as_u_fffd():
    foreign = ThreadingHTTPServer(("127.0.0.1", 0), _SurrogateHandler)
    thread = threading.Thread(target=foreign.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{foreign.server_address[1]}"
        env = DocQAEnv(synthetic_passages=300, retriever="http", retrieval_url=url, num_tasks=2)
        env.reset(seed=0)
        obs, *_ = env.step("<search>anything</search>")
        assert "lone \ufffd here" in obs and obs.encode("utf-8")
    finally:
        foreign.shutdown()
        foreign.server_close()


class _DeepHandler(_ForeignHandler):
    """A server that answers 400 KB of nested JSON arrays."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b"[" * 200_000 + b"]" * 200_000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_an_answer_nested_too_deeply_is_a_value_error_not_a_recursion_error():
    foreign = ThreadingHTTPServer(("127.0.0.1", 0), _DeepHandler)
    thread = threading.Thread(target=foreign.serve_forever, daemon=True)
    thread.start()
    try:
        client = HTTPRetriever(f"http://127.0.0.1:{foreign.server_address[1]}")
        with pytest.raises(ValueError, match="nested too deeply"):
            client.retrieve(["a"], 3)
    finally:
        foreign.shutdown()
        foreign.server_close()
