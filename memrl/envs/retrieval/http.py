"""The Search-R1 / MEM1 retrieval protocol over HTTP: request and response rules, and a client.

``POST /retrieve`` with ``{"queries": [str], "topk": 3, "return_scores": true}`` answers
``{"result": [[{"document": {"id": str, "contents": "\\"Title\\"\\ntext"}, "score": float}]]}``;
without scores each entry is the document dict alone. ``GET /health`` answers
``{"status": "ok", "num_docs": N}``. Malformed requests get a 4xx status with ``{"error": "..."}``
and the server keeps serving; ``OPTIONS`` answers 204 with ``Allow``, ``HEAD /health`` works.

The server is ``app.RetrievalApp`` (Starlette) on uvicorn (``app.RetrievalServer``), or the same
app as a Ray Serve deployment (``serve_app.py``); the response bytes are those of memrl's first,
standard-library server (``tests/envs/retrieval/data/retrieve_golden.json``). The client keeps one
persistent connection per thread, so it can point at memrl's server or at an existing Search-R1
retrieval server.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import threading
import time
from urllib.parse import urlsplit

from memrl.envs.retrieval.base import MAX_TOPK, Hit, check_topk
from memrl.envs.retrieval.corpus import split_contents, to_contents

logger = logging.getLogger(__name__)

MAX_QUERIES = 1024
"""Most queries in one request."""
DEFAULT_TOPK = 3


class RequestError(ValueError):
    """A request that breaks the protocol (the server answers it with ``status``)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def parse_request(body: bytes) -> tuple[list[str], int, bool]:
    """Validates a ``/retrieve`` body; returns (queries, topk, return_scores)."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise RequestError(f"body is not valid UTF-8 JSON ({err})") from None
    except RecursionError:
        raise RequestError("body is not valid UTF-8 JSON (nested too deeply)") from None
    if not isinstance(payload, dict):
        raise RequestError(f"body must be a JSON object, got {type(payload).__name__}")
    queries = payload.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError(
            f"'queries' must be a list of strings, got {_short(queries)}; "
            'send {"queries": ["..."], "topk": 3}'
        )
    if len(queries) > MAX_QUERIES:
        raise RequestError(f"{len(queries)} queries in one request; at most {MAX_QUERIES}", 413)
    topk = payload.get("topk", DEFAULT_TOPK)
    if topk is None:
        topk = DEFAULT_TOPK
    try:
        check_topk(topk)
    except (TypeError, ValueError):
        raise RequestError(
            f"'topk' must be an integer in [1, {MAX_TOPK}], got {_short(topk)}"
        ) from None
    return_scores = payload.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(f"'return_scores' must be true or false, got {_short(return_scores)}")
    return queries, topk, return_scores


def _short(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def render_result(hits: list[list[Hit]], return_scores: bool) -> dict:
    """The response body of ``/retrieve`` for the hits of each query."""
    result = []
    for query_hits in hits:
        docs = []
        for hit in query_hits:
            document = {"id": hit.id, "contents": to_contents(hit.title, hit.text)}
            docs.append({"document": document, "score": hit.score} if return_scores else document)
        result.append(docs)
    return {"result": result}


class HTTPRetriever:
    """Client of any server that speaks the Search-R1 ``/retrieve`` protocol.

    Args:
        url: base URL (``http://host:port``) or the full ``.../retrieve`` URL.
        timeout: seconds per request.
        retries: extra attempts after a connection failure (not after a 4xx answer).
    """

    def __init__(self, url: str | None, timeout: float = 30.0, retries: int = 2) -> None:
        if not url or not isinstance(url, str):
            raise ValueError(
                f"HTTPRetriever needs a server URL like http://127.0.0.1:8000, got {url!r}"
            )
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"Retrieval URL {url!r} is not an http(s) URL with a host.")
        self.url = url
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        path = parts.path.rstrip("/")
        self._path = path if path.endswith("/retrieve") else path + "/retrieve"
        self.timeout = timeout
        self.retries = retries
        self._local = threading.local()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_local")
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if self._scheme == "https"
                else http.client.HTTPConnection
            )
            conn = cls(self._host, self._port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def post(self, payload: dict) -> dict:
        """Sends one ``/retrieve`` request; returns the decoded JSON answer."""
        body = json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        last_error: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                conn = self._connection()
                conn.request("POST", self._path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                status = response.status
            except (OSError, http.client.HTTPException) as err:
                last_error = err
                self._drop_connection()
                if attempt < self.retries:
                    time.sleep(0.1 * 2**attempt)
                continue
            try:
                decoded = json.loads(data.decode("utf-8")) if data else {}
            except ValueError:
                decoded = {"error": data[:200].decode("utf-8", "replace")}
            except RecursionError:
                decoded = {"error": "the answer is JSON nested too deeply to read"}
            if status >= 400:
                message = decoded.get("error") or decoded.get("detail") or decoded
                raise ValueError(f"Retrieval server {self.url} answered {status}: {message}")
            return decoded
        raise ConnectionError(
            f"Retrieval server {self.url} unreachable after {self.retries + 1} attempts "
            f"({last_error}). Start one with `memrl serve retrieval` or fix the URL."
        )

    def retrieve(self, queries: list[str], topk: int) -> list[list[Hit]]:
        """For each query, up to ``topk`` hits, best first."""
        check_topk(topk)
        queries = list(queries)
        if not queries:
            return []
        answer = self.post({"queries": queries, "topk": topk, "return_scores": True})
        result = answer.get("result") if isinstance(answer, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise ValueError(
                f"Retrieval server {self.url} sent no 'result' list with one entry per query "
                f"({len(queries)}); got {_short(answer)}"
            )
        return [[_hit(entry) for entry in entries] for entries in result]


def _hit(entry: dict) -> Hit:
    document, score = (
        (entry["document"], entry.get("score")) if "document" in entry else (entry, None)
    )
    if "contents" in document:
        title, text = split_contents(document["contents"])
    else:
        title, text = document.get("title", ""), document.get("text", "")
    score = float(score) if isinstance(score, int | float) else math.nan
    return Hit(id=str(document.get("id", "")), title=title, text=text, score=score)
