"""A small web site served on 127.0.0.1 for tests, the benchmark and offline demos.

It has a search engine (HTML results in its own markup, a SearXNG-style HTML and JSON endpoint,
and a Serper-style JSON API that checks an API key), article pages about invented facts, and the
hard cases: a page built by JavaScript after load, a slow page, a 404, redirects to private and
link-local addresses, a redirect and links to malformed URLs, a huge page, a binary file and a
plain-text file. What a hostile server may send has routes too: redirects to a Latin-1 path and to
a host with a NUL, search results with lone surrogates (``/api/odd``), a deeply nested JSON body
(``/api/deep``), and ``/echo-host``, which answers the Host header it got.
``LocalSite.tasks()`` gives QA tasks whose answers are on its pages.
"""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ARTICLES: dict[str, tuple[str, str]] = {
    "zorbania": (
        "Zorbania - facts",
        "Zorbania is a small invented country. The capital of "
        "Zorbania is Quillton, a city on the river Mell. Zorbania was founded in 1731.",
    ),
    "mell-river": (
        "River Mell",
        "The river Mell flows 412 kilometres from the Ashen Hills to "
        "the Grey Sea. Its largest city is Quillton.",
    ),
    "ada-brisk": (
        "Ada Brisk",
        "Ada Brisk was an invented engineer born in Quillton. She "
        "designed the Glimmer Bridge and wrote the Treatise on Tensile Glass.",
    ),
    "vornish-cuisine": (
        "Vornish cuisine",
        "The national dish of Vornland is smoked plum stew, usually served with barley bread.",
    ),
}
"""name -> (title, text) of static article pages."""

JS_FACT = "The Glimmer Bridge was completed in 1874 and is 640 metres long."
"""Only present once the page's script has run (twice delayed, after the load event)."""

logger = logging.getLogger(__name__)

BINARY_BYTES = bytes(range(256)) * 800


def _page(title: str, body: str, extra_head: str = "") -> bytes:
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif} .ad{color:red}</style>"
        f"<script>var tracking = 'should never appear in text';</script>{extra_head}</head><body>"
        "<header><a href='/'>LocalSite home</a> | <a href='/about'>About</a></header>"
        "<nav><ul><li><a href='/page/zorbania'>Zorbania</a></li>"
        "<li><a href='/page/mell-river'>Mell</a></li></ul></nav>"
        f"<main>{body}</main>"
        "<footer>Copyright LocalSite. Navigation footer text.</footer></body></html>"
    ).encode()


def _article(name: str) -> bytes:
    title, text = ARTICLES[name]
    links = "".join(
        f"<li><a href='/page/{other}'>{html.escape(ARTICLES[other][0])}</a></li>"
        for other in ARTICLES
        if other != name
    )
    body = (
        f"<article><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>"
        f"<h2>See also</h2><ul>{links}</ul></article>"
    )
    return _page(title, body)


_JS_PAGE = _page(
    "Glimmer Bridge",
    "<article id='root'><h1>Glimmer Bridge</h1><p id='status'>Loading...</p></article>",
    extra_head=(
        "<script>window.addEventListener('load', () => setTimeout(() => {"
        "const p = document.createElement('p');"
        "p.textContent = 'The Glimmer Bridge spans the river Mell.';"
        "document.getElementById('root').appendChild(p);"
        "setTimeout(() => { document.getElementById('status').textContent = "
        f"{json.dumps(JS_FACT)}; }}, 150); }}, 150));</script>"
    ),
)


def _catalogue(base: str) -> list[tuple[str, str, str]]:
    """(title, path, snippet) of everything the site's search engine indexes."""
    entries = [(title, f"/page/{name}", text[:120]) for name, (title, text) in ARTICLES.items()]
    entries += [
        ("Glimmer Bridge (interactive)", "/js", "Glimmer Bridge history, bridge built by script"),
        ("Slow page", "/slow", "a slow page that answers after a delay"),
        ("Missing page", "/missing", "a page that does not exist"),
        ("Private redirect", "/redirect-private", "redirect to a private address"),
        ("Huge page", "/huge", "a huge page of filler text"),
        ("Binary file", "/file.bin", "a binary file download"),
        ("Plain notes", "/notes.txt", "plain text notes about Quillton"),
    ]
    return entries


MAX_BODY_BYTES = 1_000_000
"""Largest POST body the site reads (its API takes a query of a few words)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30.0  # a client that stops mid-request is dropped, not waited on forever
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        return

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str = "text/html; charset=utf-8",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(body)
            except OSError:
                pass

    def _results(self, query: str) -> list[tuple[str, str, str]]:
        words = [w for w in query.lower().split() if len(w) > 2]
        hits = []
        for title, path, snippet in _catalogue(self.server.site.url):
            text = (
                title + " " + snippet + " " + ARTICLES.get(path.rsplit("/", 1)[-1], ("", ""))[1]
            ).lower()
            score = sum(text.count(w) for w in words)
            if score or query.strip().lower() == "everything":
                hits.append((score, title, path, snippet))
        hits.sort(key=lambda h: -h[0])
        return [(t, p, s) for _, t, p, s in hits]

    def do_GET(self) -> None:  # noqa: N802 (stdlib naming)
        self._route("GET", b"")

    def do_HEAD(self) -> None:  # noqa: N802 (stdlib naming)
        self._route("HEAD", b"")

    def do_POST(self) -> None:  # noqa: N802 (stdlib naming)
        declared = self.headers.get("Content-Length") or "0"
        if not (declared.isascii() and declared.isdigit()) or int(declared) > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(413, b"body missing a valid Content-Length or over 1 MB", "text/plain")
            return
        length = int(declared)
        self._route("POST", self.rfile.read(length) if length else b"")

    def _route(self, method: str, body: bytes) -> None:
        site = self.server.site
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        site.hits[path] += 1
        q = query.get("q", [""])[0]
        if path == "/search":
            items = "".join(
                f"<div class='hit'><h3><a class='hit-title' href='{p}'>{html.escape(t)}</a></h3>"
                f"<span class='hit-url'>{p}</span><p class='hit-snippet'>{html.escape(s)}</p></div>"
                for t, p, s in self._results(q)
            )
            self._send(200, _page(f"{q} - LocalSearch", f"<div id='hits'>{items}</div>"))
        elif path == "/searx/search" and query.get("format", [""])[0] == "json":
            results = [
                {"title": t, "url": site.url + p, "content": s} for t, p, s in self._results(q)
            ]
            self._send(
                200, json.dumps({"query": q, "results": results}).encode(), "application/json"
            )
        elif path == "/searx/search":
            items = "".join(
                f"<article class='result'><h3><a href='{site.url}{p}'>{html.escape(t)}</a></h3>"
                f"<p class='content'>{html.escape(s)}</p></article>"
                for t, p, s in self._results(q)
            )
            self._send(200, _page(f"{q} - SearXNG", f"<div id='urls'>{items}</div>"))
        elif path == "/api/search" and method == "POST":
            if self.headers.get("X-API-KEY") != site.api_key:
                self._send(403, b'{"message": "bad api key"}', "application/json")
                return
            request = json.loads(body or b"{}")
            organic = [
                {"title": t, "link": site.url + p, "snippet": s, "position": i + 1}
                for i, (t, p, s) in enumerate(self._results(request.get("q", "")))
            ]
            self._send(200, json.dumps({"organic": organic}).encode(), "application/json")
        elif path.startswith("/page/") and path[6:] in ARTICLES:
            self._send(200, _article(path[6:]))
        elif path == "/js":
            self._send(200, _JS_PAGE)
        elif path == "/slow":
            time.sleep(float(query.get("delay", [str(site.slow_delay_s)])[0]))
            self._send(200, _page("Slow page", "<p>The slow page finally answered.</p>"))
        elif path == "/redirect-private":
            self._send(302, b"", headers={"Location": "http://10.255.255.1/secret"})
        elif path == "/redirect-linklocal":
            self._send(302, b"", headers={"Location": "http://169.254.169.254/latest/meta-data/"})
        elif path == "/redirect-https-private":
            self._send(302, b"", headers={"Location": "https://10.255.255.1/secret"})
        elif path == "/redirect-malformed":
            self._send(302, b"", headers={"Location": "http://[not-an-address/x"})
        elif path == "/bad-links":
            links = "<a href='http://[x'>unbalanced</a> <a href='http://[nohost]/'>bracketed</a>"
            body = f"<h1>Bad links</h1><p>Links no parser accepts. {links}</p>"
            self._send(200, _page("Bad links", body + "<a href='/page/ada-brisk'>Ada</a>"))
        elif path == "/lone-surrogate":
            script = (
                "<script>document.getElementById('s').textContent = "
                "'A lone ' + String.fromCharCode(0xD800) + ' surrogate in the text.';</script>"
            )
            self._send(200, _page("Lone surrogate", f"<p id='s'>loading</p>{script}"))
        elif path == "/redirect-latin1":  # a raw byte 0xE9: http.client reads it as Latin-1
            self._send(302, b"", headers={"Location": "/caf\xe9 au lait"})
        elif path == "/redirect-nul-host":
            self._send(302, b"", headers={"Location": "http://127.0.0.1\x00.example/x"})
        elif path == "/api/odd":
            # json.dumps escapes the lone surrogates: valid JSON that decodes to ill-formed text
            odd = {"title": "Broken \ud800 title", "url": site.url + "/page/zorbania?\udfff"}
            results = [{**odd, "content": "a snippet with \udbff in it"}]
            self._send(200, json.dumps({"results": results}).encode(), "application/json")
        elif path == "/api/deep":
            depth = 200_000
            self._send(200, b"[" * depth + b"]" * depth, "application/json")
        elif path == "/echo-host":
            self._send(200, (self.headers.get("Host") or "").encode(), "text/plain")
        elif path == "/redirect-ok":
            self._send(302, b"", headers={"Location": "/page/zorbania"})
        elif path == "/huge":
            paragraph = "<p>" + "filler words about nothing in particular " * 25 + "</p>"
            body_html = "<p>HUGE PAGE START</p>" + paragraph * (site.huge_bytes // len(paragraph))
            self._send(200, _page("Huge page", body_html))
        elif path == "/file.bin":
            self._send(200, BINARY_BYTES, "application/octet-stream")
        elif path == "/notes.txt":
            self._send(
                200,
                b"Notes: Quillton has 3 bridges.\nThe mayor is Oren Vale.\n",
                "text/plain; charset=utf-8",
            )
        elif path == "/":
            self._send(
                200,
                _page(
                    "LocalSite", "<p>Welcome. Try <a href='/search?q=zorbania'>a search</a>.</p>"
                ),
            )
        else:
            self._send(
                404,
                _page("404 Not Found", f"<h1>Not Found</h1><p>No page at {html.escape(path)}.</p>"),
            )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    site: LocalSite

    def handle_error(self, request: object, client_address: object) -> None:
        # Clients that hang up mid-answer (a cut page, a timed-out load) are routine here.
        logger.debug("local site: request from %s failed", client_address, exc_info=True)


class LocalSite:
    """The site on 127.0.0.1 (``port``, 0: a free one); use as a context manager or call
    ``close``."""

    def __init__(
        self,
        slow_delay_s: float = 6.0,
        huge_bytes: int = 12_000_000,
        api_key: str = "test-key-0123",
        port: int = 0,
    ) -> None:
        self.slow_delay_s = slow_delay_s
        self.huge_bytes = huge_bytes
        self.api_key = api_key
        self.hits: Counter[str] = Counter()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.site = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="memrl-local-site", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def search_options(self) -> dict[str, Any]:
        """``search.options`` of an ``html`` backend for this site's results page."""
        return {
            "url_template": self.url + "/search?q={query}",
            "result_selector": "div.hit",
            "title_selector": ".hit-title",
            "link_selector": "a.hit-title",
            "snippet_selector": ".hit-snippet",
            "name": "localsite",
        }

    @staticmethod
    def tasks() -> list[dict[str, Any]]:
        """QA tasks answerable from the site (doc-QA task format)."""
        return [
            {
                "task_id": "local-0",
                "questions": ["What is the capital of Zorbania?"],
                "answers": [["Quillton"]],
                "source": "localsite",
            },
            {
                "task_id": "local-1",
                "questions": [
                    "In which year was the Glimmer Bridge completed?",
                    "What is the national dish of Vornland?",
                ],
                "answers": [["1874"], ["smoked plum stew", "plum stew"]],
                "source": "localsite",
            },
        ]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LocalSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
