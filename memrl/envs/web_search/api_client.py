"""A small HTTP client for JSON search APIs that applies the URL policy to every hop.

Each request (and each redirect) is checked by ``UrlPolicy`` after DNS resolution, and the
connection goes to the very address that was vetted (TLS still verifies the host name), so DNS
cannot switch to a private address between check and connect. Bodies are capped.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from memrl.envs.web_search.policy import UrlDenied, UrlPolicy, join_url, request_target

MAX_REDIRECTS = 5


class HttpError(Exception):
    """A request that failed (connection, timeout, size); ``transient`` says if a retry may help."""

    def __init__(self, message: str, transient: bool = True, status: int = 0) -> None:
        super().__init__(message)
        self.transient = transient
        self.status = status


@dataclass
class Response:
    status: int
    url: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON.

        Raises:
            ValueError: the body is not JSON, or is nested too deeply to parse.
        """
        try:
            return json.loads(self.body.decode("utf-8", "replace"))
        except RecursionError:
            raise ValueError(f"the JSON body of {self.url} is nested too deeply") from None


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class HttpClient:
    """GET/POST with the policy on every hop, redirects followed by hand, bodies capped."""

    def __init__(
        self, policy: UrlPolicy, timeout_s: float, max_bytes: int, user_agent: str = ""
    ) -> None:
        self.policy = policy
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.user_agent = user_agent or "memrl-websearch/0.1"

    def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        json_body: Any = None,
    ) -> Response:
        """Sends a request.

        Raises:
            UrlDenied: the URL or a redirect target is refused by the policy.
            HttpError: connection failure, timeout, too many redirects or a body over the cap.
        """
        if params:
            url = url + ("&" if "?" in url else "?") + urlencode(params)
        body = json.dumps(json_body).encode() if json_body is not None else None
        send_headers = {"User-Agent": self.user_agent, "Accept": "application/json, */*"}
        if body is not None:
            send_headers["Content-Type"] = "application/json"
        send_headers.update(headers or {})
        for _ in range(MAX_REDIRECTS + 1):
            response = self._once(method, url, send_headers, body)
            if response.status in (301, 302, 303, 307, 308) and "location" in response.headers:
                # http.client decodes headers as Latin-1: back to the bytes sent, read as UTF-8.
                raw = response.headers["location"].encode("latin-1", "replace")
                location = raw.decode("utf-8", "surrogateescape")
                target = join_url(url, location)
                if target is None:
                    raise HttpError(
                        f"{url} redirects to a malformed URL {location[:100]!r}", transient=False
                    )
                url = target
                if response.status == 303 or (response.status in (301, 302) and method == "POST"):
                    method, body = "GET", None
                continue
            return response
        raise HttpError(f"more than {MAX_REDIRECTS} redirects from {url}", transient=False)

    def _once(self, method: str, url: str, headers: dict[str, str], body: bytes | None) -> Response:
        host, port = self.policy.check_url(url)
        vetted = self.policy.resolve(host, port)
        parts = urlsplit(url)
        cls = _PinnedHTTPS if parts.scheme.lower() == "https" else _PinnedHTTP
        conn = cls(vetted.host, vetted.address, port, self.timeout_s)
        try:
            conn.request(method, request_target(parts), body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read(self.max_bytes + 1)
        except (OSError, http.client.HTTPException) as err:
            raise HttpError(f"{type(err).__name__} on {parts.scheme}://{host}: {err}") from err
        finally:
            conn.close()
        if len(data) > self.max_bytes:
            raise HttpError(f"response of {url} exceeds {self.max_bytes} bytes", transient=False)
        return Response(
            status=resp.status,
            url=url,
            headers={k.lower(): v for k, v in resp.getheaders()},
            body=data,
        )


__all__ = ["HttpClient", "HttpError", "Response", "UrlDenied"]
