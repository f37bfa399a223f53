"""A filtering forward proxy on 127.0.0.1 that every browser and HTTP request goes through.

Chromium is started with ``--proxy-server`` pointing here (and ``<-loopback>`` so that not even
loopback bypasses it). For each request, redirects included since each hop is a new request, the
proxy applies ``UrlPolicy.resolve`` (host lists, DNS, address classes), connects to the address it
vetted, and cuts responses and HTTPS tunnels at ``max_bytes``. Refusals get a 403 page carrying
``X-Memrl-Blocked`` and a ``memrl-blocked`` meta tag, and every request is logged as an ``Event``
so callers can tell what happened to a navigation.
"""

from __future__ import annotations

import contextlib
import html
import http.client
import itertools
import logging
import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from memrl.envs.web_search.policy import (
    UrlDenied,
    UrlPolicy,
    join_url,
    request_target,
    split_url,
)

logger = logging.getLogger(__name__)

BLOCKED_HEADER = "X-Memrl-Blocked"
BLOCKED_META = "memrl-blocked"
_HOP_HEADERS = frozenset(
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ]
)
_CHUNK = 64 * 1024
MAX_REQUEST_BODY = 1_000_000
"""Largest request body the proxy forwards (form posts; the browser uploads nothing bigger)."""


@dataclass(frozen=True)
class Event:
    """One request seen by the proxy."""

    seq: int
    """Increasing number; ``SafetyProxy.mark()`` returns the next one."""
    method: str
    """HTTP method, or ``CONNECT`` for an HTTPS tunnel."""
    url: str
    """Absolute URL (``https://host:port`` for tunnels)."""
    status: int
    """Upstream status; 403 for a refusal, 502 when the upstream could not be reached."""
    blocked: str | None = None
    """Why the policy refused it, else None."""
    content_type: str = ""
    """Upstream Content-Type."""
    bytes: int = 0
    """Body bytes passed on (tunnel bytes for CONNECT)."""
    truncated: bool = False
    """The body or tunnel was cut at ``max_bytes``."""
    error: str = ""
    """Upstream connection error, if any."""
    location: str = ""
    """``Location`` header of a redirect (absolute), to follow a navigation's chain."""


class SafetyProxy:
    """The proxy server; one per browser so its event log is that browser's alone."""

    def __init__(self, policy: UrlPolicy, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.policy = policy
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self._events: deque[Event] = deque(maxlen=2000)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="memrl-web-proxy", daemon=True
        )
        self._thread.start()

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``."""
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def mark(self) -> int:
        """The sequence number the next event will get (for ``events_since``)."""
        with self._lock:
            return self._events[-1].seq + 1 if self._events else 0

    def events_since(self, seq: int) -> list[Event]:
        with self._lock:
            return [e for e in self._events if e.seq >= seq]

    def record(self, **fields: object) -> None:
        with self._lock:
            self._events.append(Event(seq=next(self._seq), **fields))  # type: ignore[arg-type]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: SafetyProxy

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that hangs up mid-answer (a page load that timed out) is routine here.
        logger.debug("proxy: request from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        logger.debug("proxy: " + format, *args)

    @property
    def proxy(self) -> SafetyProxy:
        return self.server.proxy

    def setup(self) -> None:
        # A client that stops sending (half a request line, a short body) gets its connection
        # closed after the proxy's timeout instead of holding a thread forever.
        self.timeout = self.proxy.timeout_s
        super().setup()

    def _refuse(self, url: str, reason: str) -> None:
        self.proxy.record(method=self.command, url=url, status=403, blocked=reason)
        logger.info("blocked %s %s: %s", self.command, url, reason)
        body = (
            "<!doctype html><html><head><title>Blocked by memrl</title>"
            f'<meta name="{BLOCKED_META}" content="{html.escape(reason)}"></head>'
            f"<body><p>memrl blocked this request: {html.escape(reason)}</p></body></html>"
        ).encode()
        self.send_response(403, "Blocked by memrl URL policy")
        self.send_header(BLOCKED_HEADER, reason.encode("ascii", "replace").decode())
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            with contextlib.suppress(OSError):
                self.wfile.write(body)
        self.close_connection = True

    def _bad_gateway(self, url: str, error: str) -> None:
        self._fail(url, 502, f"upstream error: {error}", error)

    def _fail(self, url: str, status: int, message: str, error: str = "") -> None:
        self.proxy.record(method=self.command, url=url, status=status, error=error or message)
        body = f"memrl proxy: {message}".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)
        self.close_connection = True

    def do_CONNECT(self) -> None:  # noqa: N802 (stdlib naming)
        target = _request_text(self.path)
        host, _, port_text = target.rpartition(":")
        host = host.strip("[]")
        url = f"https://{target}"
        try:
            port = int(port_text) if port_text.isascii() and port_text.isdigit() else -1
            if not 0 < port < 65536:
                raise UrlDenied(f"CONNECT target {target[:100]!r} has no valid port")
            vetted = self.proxy.policy.resolve(host, port)
        except UrlDenied as err:
            self._refuse(url, str(err))
            return
        try:
            upstream = socket.create_connection(
                (vetted.address, vetted.port), timeout=self.proxy.timeout_s
            )
        except OSError as err:
            self._bad_gateway(url, str(err))
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        sent, truncated = _relay(
            self.connection, upstream, self.proxy.max_bytes, self.proxy.timeout_s
        )
        upstream.close()
        self.proxy.record(method="CONNECT", url=url, status=200, bytes=sent, truncated=truncated)
        self.close_connection = True

    def _forward(self) -> None:
        url = _request_text(self.path)
        parts = split_url(url)
        try:
            if parts is None or parts.scheme.lower() != "http":
                raise UrlDenied(
                    f"the proxy forwards absolute http:// URLs only (got {url[:100]!r})"
                )
            host, port = self.proxy.policy.check_url(url)
            vetted = self.proxy.policy.resolve(host, port)
        except UrlDenied as err:
            self._refuse(url, str(err))
            return
        declared = self.headers.get("Content-Length") or "0"
        length = int(declared) if declared.isascii() and declared.isdigit() else -1
        if length < 0:
            self._fail(url, 400, f"bad Content-Length {declared[:40]!r}")
            return
        if length > MAX_REQUEST_BODY:
            self._fail(url, 413, f"request body of {length} bytes; at most {MAX_REQUEST_BODY}")
            return
        body = self.rfile.read(length) if length else None
        if body is not None and len(body) < length:
            self.close_connection = True  # the client hung up mid-body
            return
        conn = http.client.HTTPConnection(vetted.address, port, timeout=self.proxy.timeout_s)
        try:
            conn.putrequest(
                self.command, request_target(parts), skip_host=True, skip_accept_encoding=True
            )
            # The upstream learns the host from the vetted name, never from the client's header.
            name = f"[{vetted.host}]" if ":" in vetted.host else vetted.host
            conn.putheader("Host", name if port == 80 else f"{name}:{port}")
            for key, value in self.headers.items():
                if key.lower() not in _HOP_HEADERS and key.lower() != "host":
                    conn.putheader(key, value)
            conn.putheader("Connection", "close")
            conn.endheaders(body)
            resp = conn.getresponse()
        except OSError as err:
            conn.close()
            self._bad_gateway(url, str(err))
            return
        # Close-delimited bodies: a body cut at the cap then ends like any other.
        self.send_response_only(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in _HOP_HEADERS and key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Connection", "close")
        self.end_headers()
        sent, truncated = 0, False
        try:
            while True:
                chunk = resp.read(_CHUNK)
                if not chunk:
                    break
                room = self.proxy.max_bytes - sent
                if len(chunk) > room:
                    chunk, truncated = chunk[:room], True
                self.wfile.write(chunk)
                sent += len(chunk)
                if truncated:
                    break
        except OSError as err:
            logger.debug("proxy: stream of %s ended early: %s", url, err)
        finally:
            conn.close()
        self.proxy.record(
            method=self.command,
            url=url,
            status=resp.status,
            content_type=resp.getheader("Content-Type", ""),
            location=join_url(url, resp.getheader("Location", "")) or ""
            if resp.getheader("Location")
            else "",
            bytes=sent,
            truncated=truncated,
        )
        self.close_connection = True

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = _forward


def _request_text(target: str) -> str:
    """A request line's target as text: ``http.server`` decodes it as Latin-1, the bytes are
    read as UTF-8 (the bytes no UTF-8 decoder takes kept as surrogates, which no host passes)."""
    return target.encode("latin-1", "replace").decode("utf-8", "surrogateescape")


def _relay(
    client: socket.socket, upstream: socket.socket, max_bytes: int, idle_s: float
) -> tuple[int, bool]:
    """Copies bytes both ways until one side closes, the tunnel idles or passes max_bytes."""
    total = 0
    with selectors.DefaultSelector() as sel:
        sel.register(client, selectors.EVENT_READ, upstream)
        sel.register(upstream, selectors.EVENT_READ, client)
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            ready = sel.select(timeout=1.0)
            for key, _ in ready:
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    return total, False
                if not data:
                    return total, False
                total += len(data)
                try:
                    key.data.sendall(data)
                except OSError:
                    return total, False
                last = time.monotonic()
                if total > max_bytes:
                    return total, True
    return total, False
