"""memrl's HTTP services (retrieval, WebShop, the web-search test site) on uvicorn, in a thread
or in the foreground.

``bind`` opens the listening socket first, so a port that is in use or out of range is a clear
``ValueError`` before a service spends minutes building its index. ``ASGIServer`` then serves a
Starlette app on that socket with uvicorn's h11 protocol (bounded header sizes, malformed
requests answered 400 by the server itself), guarded against clients that hold connections
without using them: a request's headers must arrive within ``HEADER_TIMEOUT_S`` of the
connection opening or of the previous response (a client that sends nothing, or a header a byte
at a time, is disconnected; uvicorn's own keep-alive timeout restarts with every byte), and at
most ``max_connections`` connections stay open (default: ``MAX_CONNECTIONS``, at most half the
process's file-descriptor limit): one more closes the connection that has waited longest for a
request, so idle connections cannot starve ``/health`` or exhaust descriptors. ``read_body`` is
how the apps take a request body: a size cap checked against Content-Length before reading and
while reading, and a deadline, so a short or endless body costs a 408 or a 413, never a blocked
worker.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from typing import Any

import anyio

logger = logging.getLogger(__name__)

BODY_TIMEOUT_S = 30.0
"""Longest a client may take to send a request body."""
HEADER_TIMEOUT_S = 10.0
"""Longest a connection may wait for a request's headers (from opening, or from the previous
response) before the server closes it."""
KEEP_ALIVE_S = 5.0
"""An idle keep-alive connection is closed this long after its last response."""
MAX_CONNECTIONS = 1024
"""Most connections open at once (lowered to half the file-descriptor limit where that is less)."""


def default_max_connections() -> int:
    """``MAX_CONNECTIONS``, or half this process's soft file-descriptor limit if that is less."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, soft // 2))


class BodyError(Exception):
    """A request body that cannot be taken; ``status`` is the answer (400, 408, 411, 413)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: any free port).

    Raises:
        ValueError: the port is not an int in [0, 65535], is in use, or the host cannot be bound;
            the message says what to change.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"--port must be an int in [0, 65535] (0: any free port), got {port!r}.")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as err:
        raise ValueError(f"--host {host!r} is not an address of this machine ({err}).") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            reason = "the port is in use by another program"
        elif err.errno == errno.EADDRNOTAVAIL:
            reason = "the address is not one of this machine's"
        elif err.errno == errno.EACCES:
            reason = "ports below 1024 need privileges"
        else:
            reason = str(err)
        raise ValueError(
            f"Cannot listen on {host}:{port}: {reason}. Pick another --port (0: any free port) "
            "or --host."
        ) from None
    return sock


async def read_body(request: Any, limit: int, timeout_s: float = BODY_TIMEOUT_S) -> bytes:
    """The body of a Starlette request, at most ``limit`` bytes, within ``timeout_s``.

    Raises:
        BodyError: 411 without Content-Length (and not chunked), 413 over ``limit``, 408 when the
            client stops sending, 400 when it hangs up mid-body.
    """
    declared = request.headers.get("content-length")
    if declared is None and "chunked" not in request.headers.get("transfer-encoding", ""):
        raise BodyError(411, "Content-Length header required")
    if declared is not None and int(declared) > limit:
        raise BodyError(413, f"body of {int(declared)} bytes; at most {limit}")
    from starlette.requests import ClientDisconnect

    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyError(413, f"body of more than {limit} bytes; at most {limit}")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyError(408, f"the body did not arrive within {timeout_s:g} s") from None
    except ClientDisconnect:
        raise BodyError(400, "the client hung up before sending the whole body") from None
    body = b"".join(chunks)
    if declared is not None and len(body) < int(declared):
        raise BodyError(400, f"the client sent {len(body)} of {int(declared)} body bytes")
    return body


def _guarded_protocol(
    header_timeout_s: float, max_connections: int, mixin: type | None = None
) -> type:
    """uvicorn's h11 protocol with a deadline for each request's headers and a cap on the
    connections open at once (see the module docstring), ``mixin`` ahead of it in the bases."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _deadline: Any = None
        _waiting_since = 0.0

        def waiting(self) -> bool:
            """No request in progress: the connection waits for a request's headers."""
            idle_cycle = self.cycle is None or self.cycle.response_complete
            return self.conn.their_state is h11.IDLE and idle_cycle

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()
            # Connections closed a moment ago are still in the set until the loop reports them.
            live = [c for c in self.connections if not c.transport.is_closing()]
            if len(live) > max_connections:
                waiting = [c for c in live if c is not self and c.waiting()]
                oldest = min(waiting, key=lambda c: c._waiting_since, default=self)
                logger.warning(
                    "%d connections open (at most %d): closing one that waits for a request",
                    len(live),
                    max_connections,
                )
                oldest.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self.waiting():
                self._disarm()  # the headers are in: the request's own limits apply

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.waiting():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._waiting_since = self.loop.time()
            self._deadline = self.loop.call_later(header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self.waiting() and not self.transport.is_closing():
                self.transport.close()

    if mixin is None:
        return GuardedH11Protocol
    return type(f"{mixin.__name__}GuardedH11Protocol", (mixin, GuardedH11Protocol), {})


class ASGIServer:
    """Serves an ASGI app with uvicorn on a socket from ``bind``.

    Args:
        app: the ASGI application.
        sock: a listening socket (``bind``); the server closes it when it stops.
        name: thread name and log prefix.
        header_timeout_s: longest wait for a request's headers (see ``HEADER_TIMEOUT_S``).
        keep_alive_s: an idle keep-alive connection is closed this long after its last response.
        max_connections: most connections open at once (default ``default_max_connections()``).
        protocol_mixin: a class put ahead of the guarded h11 protocol in its bases (the test
            site's writes a header byte that h11 refuses to write); the guards still apply.
    """

    def __init__(
        self,
        app: Any,
        sock: socket.socket,
        name: str = "memrl-http",
        *,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        keep_alive_s: float = KEEP_ALIVE_S,
        max_connections: int | None = None,
        protocol_mixin: type | None = None,
    ) -> None:
        import uvicorn

        if max_connections is None:
            max_connections = default_max_connections()
        if max_connections < 1 or header_timeout_s <= 0 or keep_alive_s <= 0:
            raise ValueError(
                f"ASGIServer needs max_connections >= 1 and positive timeouts, got "
                f"max_connections={max_connections}, header_timeout_s={header_timeout_s}, "
                f"keep_alive_s={keep_alive_s}"
            )
        self.name = name
        self._sock = sock
        config = uvicorn.Config(
            app,
            http=_guarded_protocol(header_timeout_s, max_connections, protocol_mixin),
            lifespan="off",
            log_config=None,  # uvicorn's loggers propagate to the application's logging setup
            log_level="warning",
            access_log=False,
            server_header=False,
            timeout_keep_alive=keep_alive_s,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` the socket listens on."""
        host, port = self._sock.getsockname()[:2]
        return host, port

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8000`` (IPv6 hosts in brackets)."""
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self, timeout_s: float = 30.0) -> ASGIServer:
        """Serves from a daemon thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self.serve_forever, name=self.name, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start serving on {self.url}")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        """Serves in this thread until ``stop`` (or, in the main thread, Ctrl-C)."""
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self._sock.close()

    def stop(self) -> None:
        """Stops serving (open requests get ``timeout_graceful_shutdown`` to finish)."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()
