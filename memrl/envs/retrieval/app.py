"""The retrieval service as an ASGI app: ``POST /retrieve`` and ``GET /health`` (see ``http.py``).

One app serves everywhere: under uvicorn on one machine (``RetrievalServer``, ``memrl serve
retrieval``) and as a Ray Serve deployment on a cluster (``serve_app.py``), so the bytes a client
gets are the same in both. Starlette provides the request and response objects; the dispatch is
written out so that every answer, 404 and 405 included, is the protocol's ``{"error": ...}``
JSON. Retrieval runs in a worker thread (the index releases the GIL in numpy), so a slow query
never stalls the event loop.
"""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

from memrl.envs.asgi import BODY_TIMEOUT_S, ASGIServer, BodyError, bind, read_body
from memrl.envs.retrieval.base import Retriever
from memrl.envs.retrieval.http import RequestError, parse_request, render_result

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest request body the service reads."""


def _json(status: int, payload: dict, close: bool = False, allow: str = ""):
    from starlette.responses import Response

    headers = {"connection": "close"} if close else {}
    if allow:
        headers["allow"] = allow
    # json.dumps with its default separators: the bytes memrl's first server sent.
    body = json.dumps(payload).encode("utf-8")
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _options(allow: str):
    from starlette.responses import Response

    return Response(status_code=204, headers={"allow": allow})


class RetrievalApp:
    """The ASGI application of a retriever.

    Args:
        retriever: what answers the queries.
        num_docs: corpus size reported by ``GET /health``.
        body_timeout_s: longest a client may take to send a request body (then 408).
    """

    def __init__(
        self, retriever: Retriever, num_docs: int | None, body_timeout_s: float = BODY_TIMEOUT_S
    ) -> None:
        self.retriever = retriever
        self.num_docs = num_docs
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        from starlette.requests import Request

        if scope["type"] == "lifespan":  # nothing to start or stop: acknowledge both
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        response = await self._dispatch(Request(scope, receive))
        await response(scope, receive, send)

    async def _dispatch(self, request: Any):
        path = request.url.path.rstrip("/")
        method = request.method
        if path == "/health":
            if method in ("GET", "HEAD"):
                return _json(200, {"status": "ok", "num_docs": self.num_docs})
            if method == "OPTIONS":
                return _options("GET, HEAD, OPTIONS")
            return _json(405, {"error": "use GET /health"}, allow="GET, HEAD, OPTIONS")
        if path == "/retrieve":
            if method == "POST":
                return await self._retrieve(request)
            if method == "OPTIONS":
                return _options("POST, OPTIONS")
            message = (
                "use POST /retrieve with a JSON body"
                if method in ("GET", "HEAD")
                else "use POST /retrieve"
            )
            return _json(405, {"error": message}, close=method != "GET", allow="POST, OPTIONS")
        hint = "POST /retrieve or GET /health" if method in ("GET", "HEAD") else "POST /retrieve"
        return _json(404, {"error": f"no route {request.url.path!r}; use {hint}"})

    async def _retrieve(self, request: Any):
        from starlette.concurrency import run_in_threadpool

        try:
            body = await read_body(request, MAX_BODY_BYTES, self.body_timeout_s)
        except BodyError as err:
            return _json(err.status, {"error": str(err)}, close=True)
        try:
            queries, topk, return_scores = parse_request(body)
        except RequestError as err:
            return _json(err.status, {"error": str(err)})
        if not queries:
            return _json(200, render_result([], return_scores))
        try:
            hits = await run_in_threadpool(self.retriever.retrieve, queries, topk)
        except Exception as err:  # a retriever fault must not take the service down
            logger.exception("retrieval failed")
            return _json(500, {"error": f"retrieval failed: {type(err).__name__}: {err}"})
        return _json(200, render_result(hits, return_scores))


class RetrievalServer:
    """Serves a retriever over the Search-R1 protocol (``RetrievalApp`` on uvicorn).

    The socket is bound in the constructor, so a port in use is an error before anything else.

    Args:
        retriever: what answers the queries.
        host: interface to bind (default loopback only).
        port: TCP port; 0 picks a free one (see ``url``).
        num_docs: corpus size reported by ``GET /health``.
        sock: a socket already bound with ``memrl.envs.asgi.bind`` (then host and port are
            ignored): ``memrl serve retrieval`` binds before it builds the index.
        body_timeout_s: longest a client may take to send a request body (then 408).

    Raises:
        ValueError: the port is out of range or in use, or the host cannot be bound.
    """

    def __init__(
        self,
        retriever: Retriever,
        host: str = "127.0.0.1",
        port: int = 0,
        num_docs: int | None = None,
        *,
        sock: socket.socket | None = None,
        body_timeout_s: float | None = None,
    ) -> None:
        app = RetrievalApp(retriever, num_docs, body_timeout_s or BODY_TIMEOUT_S)
        self._server = ASGIServer(app, sock or bind(host, port), name="retrieval-http")

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:8000``."""
        return self._server.url

    def start(self) -> RetrievalServer:
        """Serves in a background thread (returns once it accepts connections); returns self."""
        self._server.start()
        return self

    def serve_forever(self) -> None:
        """Serves in this thread until interrupted."""
        self._server.serve_forever()

    def stop(self) -> None:
        """Stops the background thread started by ``start`` and closes the socket."""
        self._server.stop()

    def close(self) -> None:
        """Closes the listening socket (after ``serve_forever`` returned)."""
        self._server.stop()

    def __enter__(self) -> RetrievalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
