"""The WebShop site's HTTP edges on 127.0.0.1 (no browser): bodies, methods, timeouts, load."""

from __future__ import annotations

import json
import socket
import urllib.parse
import urllib.request

import pytest

from memrl.envs.asgi import ASGIServer, bind
from memrl.envs.webshop import CatalogueSpec, WebShopEngine, get_world
from memrl.envs.webshop.site import WebShopApp, WebShopSite, start_server


@pytest.fixture(scope="module")
def site():
    world = get_world(CatalogueSpec(num_products=300, seed=0))
    return WebShopSite(WebShopEngine(world), world.split("all"))


@pytest.fixture(scope="module")
def server(site):
    srv = start_server(site, "127.0.0.1", 0)
    yield srv
    srv.stop()


def _raw(url: str, data: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_forms_search_and_click_through_redirects(server, site):
    sid = site.new_session(0)
    form = urllib.parse.urlencode({"search_query": "shampoo"}).encode()
    with urllib.request.urlopen(f"{server.url}/s/{sid}/search", data=form, timeout=20) as resp:
        assert resp.url.endswith(f"/s/{sid}") and "data-page='results'" in resp.read().decode()
    with urllib.request.urlopen(f"{server.url}/s/{sid}/state.json", timeout=20) as resp:
        assert json.load(resp)["page"] == "results"


@pytest.mark.parametrize(
    "length, status",
    [("1000000000000", 413), ("70000", 413), ("-1", 400), ("ten", 400)],
)
def test_bad_body_lengths_are_refused_at_once(server, site, length, status):
    sid = site.new_session(0)
    head = f"POST /s/{sid}/search HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n"
    assert _status(_raw(server.url, head.encode())) == status


def test_a_short_body_times_out_with_408(site):
    srv = ASGIServer(WebShopApp(site, body_timeout_s=1.0), bind("127.0.0.1", 0)).start()
    try:
        sid = site.new_session(0)
        head = f"POST /s/{sid}/search HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n"
        assert _status(_raw(srv.url, head.encode() + b"search_query=sh")) == 408
    finally:
        srv.stop()


def test_head_and_options(server, site):
    sid = site.new_session(0)
    head = _raw(
        server.url, f"HEAD /s/{sid} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
    assert _status(head) == 200 and head.endswith(b"\r\n\r\n")
    options = _raw(
        server.url,
        f"OPTIONS /s/{sid}/search HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(),
    )
    assert _status(options) == 204 and b"allow: POST, OPTIONS" in options
    request = f"PUT /s/{sid} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    put = _raw(server.url, request.encode())
    assert _status(put) == 405


def test_a_port_in_use_is_a_clear_error(server, site):
    port = int(server.url.rsplit(":", 1)[1])
    with pytest.raises(ValueError, match="the port is in use"):
        start_server(site, "127.0.0.1", port)
