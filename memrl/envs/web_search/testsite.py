"""A small web site served on 127.0.0.1 for tests, the benchmark and offline demos.

It has a search engine (HTML results in its own markup, a SearXNG-style HTML and JSON endpoint,
and a Serper-style JSON API that checks an API key), article pages about invented facts, and the
hard cases: a page built by JavaScript after load, a slow page, a 404, redirects to private and
link-local addresses, a redirect and links to malformed URLs, a huge page, a binary file and a
plain-text file. What a hostile server may send has routes too: redirects to a Latin-1 path and to
a host with a NUL, search results with lone surrogates (``/api/odd``), a deeply nested JSON body
(``/api/deep``), and ``/echo-host``, which answers the Host header it got.
``LocalSite.tasks()`` gives QA tasks whose answers are on its pages.

It is served like memrl's other HTTP services (``memrl.envs.asgi``: uvicorn, a deadline for each
request's headers, a cap on open connections, a deep listen backlog), so clients that open
connections and drip bytes into them cannot pile up threads or starve the site.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import anyio

from memrl.envs.asgi import HEADER_TIMEOUT_S, ASGIServer, BodyError, bind, read_body

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

_HTML = "text/html; charset=utf-8"
_NUL_STANDIN = "<NUL>"
"""Written where a response head must hold a NUL byte, which h11 refuses to write; ``_WritesNul``
puts the byte in its place once h11 has formatted the head."""


_REDIRECTS = {
    "/redirect-private": "http://10.255.255.1/secret",
    "/redirect-linklocal": "http://169.254.169.254/latest/meta-data/",
    "/redirect-https-private": "https://10.255.255.1/secret",
    "/redirect-malformed": "http://[not-an-address/x",
    "/redirect-latin1": "/caf\xe9 au lait",  # a raw byte 0xE9: http.client reads it as Latin-1
    "/redirect-nul-host": f"http://127.0.0.1{_NUL_STANDIN}.example/x",
    "/redirect-ok": "/page/zorbania",
}
"""path -> Location of the site's redirects (302)."""


class _WritesNul:
    """Mixed into the guarded h11 protocol (``memrl.envs.asgi``): every ``_NUL_STANDIN`` in a
    response head goes out as a NUL byte (``/redirect-nul-host`` names a host that holds one)."""

    conn: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import h11

        super().__init__(*args, **kwargs)
        send = self.conn.send
        standin = _NUL_STANDIN.encode()

        def send_with_nul(event: Any) -> bytes | None:
            data = send(event)
            if isinstance(event, h11.Response) and data:
                return data.replace(standin, b"\x00")
            return data

        self.conn.send = send_with_nul


class _Answer(NamedTuple):
    """A response of the site: status, body, Content-Type and further headers."""

    status: int
    body: bytes
    content_type: str = _HTML
    headers: tuple[tuple[str, str], ...] = ()


async def _send(send: Any, answer: _Answer) -> None:
    headers = [
        (b"content-type", answer.content_type.encode("latin-1")),
        (b"content-length", str(len(answer.body)).encode("ascii")),
    ]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    """The first value of a request header (``name`` in lower case), or None."""
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), None)


async def _wait_unless_gone(receive: Any, delay_s: float) -> None:
    """Waits ``delay_s``, less if the client hangs up meanwhile (nobody waits for the page)."""
    with anyio.move_on_after(delay_s):
        while (await receive())["type"] != "http.disconnect":
            pass


def _results(query: str, base: str) -> list[tuple[str, str, str]]:
    words = [w for w in query.lower().split() if len(w) > 2]
    hits = []
    for title, path, snippet in _catalogue(base):
        text = (
            title + " " + snippet + " " + ARTICLES.get(path.rsplit("/", 1)[-1], ("", ""))[1]
        ).lower()
        score = sum(text.count(w) for w in words)
        if score or query.strip().lower() == "everything":
            hits.append((score, title, path, snippet))
    hits.sort(key=lambda h: -h[0])
    return [(t, p, s) for _, t, p, s in hits]


class _SiteApp:
    """The site's routes as a plain ASGI app: no framework between it and uvicorn, so the heads
    are as the site writes them (uvicorn adds only Date)."""

    def __init__(self, site: LocalSite) -> None:
        self.site = site

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        if scope["method"] == "POST":
            from starlette.requests import Request

            try:
                body = await read_body(Request(scope, receive), MAX_BODY_BYTES)
            except BodyError as err:
                close = (("Connection", "close"),)
                await _send(send, _Answer(err.status, str(err).encode(), "text/plain", close))
                return
        await _send(send, await self._route(scope, receive, body))

    async def _route(self, scope: dict[str, Any], receive: Any, body: bytes) -> _Answer:
        site, method = self.site, scope["method"]
        target = scope["raw_path"] + (
            b"?" + scope["query_string"] if scope["query_string"] else b""
        )
        parts = urlsplit(target.decode("latin-1"))
        path, query = parts.path, parse_qs(parts.query)
        site.hits[path] += 1
        q = query.get("q", [""])[0]
        if path == "/search":
            items = "".join(
                f"<div class='hit'><h3><a class='hit-title' href='{p}'>{html.escape(t)}</a></h3>"
                f"<span class='hit-url'>{p}</span><p class='hit-snippet'>{html.escape(s)}</p></div>"
                for t, p, s in _results(q, site.url)
            )
            return _Answer(200, _page(f"{q} - LocalSearch", f"<div id='hits'>{items}</div>"))
        if path == "/searx/search" and query.get("format", [""])[0] == "json":
            results = [
                {"title": t, "url": site.url + p, "content": s} for t, p, s in _results(q, site.url)
            ]
            return _Answer(
                200, json.dumps({"query": q, "results": results}).encode(), "application/json"
            )
        if path == "/searx/search":
            items = "".join(
                f"<article class='result'><h3><a href='{site.url}{p}'>{html.escape(t)}</a></h3>"
                f"<p class='content'>{html.escape(s)}</p></article>"
                for t, p, s in _results(q, site.url)
            )
            return _Answer(200, _page(f"{q} - SearXNG", f"<div id='urls'>{items}</div>"))
        if path == "/api/search" and method == "POST":
            if _header(scope, b"x-api-key") != site.api_key:
                return _Answer(403, b'{"message": "bad api key"}', "application/json")
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                request = None
            if not isinstance(request, dict):
                return _Answer(
                    400, b'{"message": "the body is not a JSON object"}', "application/json"
                )
            organic = [
                {"title": t, "link": site.url + p, "snippet": s, "position": i + 1}
                for i, (t, p, s) in enumerate(_results(request.get("q", ""), site.url))
            ]
            return _Answer(200, json.dumps({"organic": organic}).encode(), "application/json")
        if path in _REDIRECTS:
            return _Answer(302, b"", headers=(("Location", _REDIRECTS[path]),))
        if path.startswith("/page/") and path[6:] in ARTICLES:
            return _Answer(200, _article(path[6:]))
        if path == "/js":
            return _Answer(200, _JS_PAGE)
        if path == "/slow":
            try:
                delay_s = float(query.get("delay", [str(site.slow_delay_s)])[0])
            except ValueError:
                return _Answer(400, b"delay must be a number of seconds", "text/plain")
            await _wait_unless_gone(receive, delay_s)
            return _Answer(200, _page("Slow page", "<p>The slow page finally answered.</p>"))
        if path == "/bad-links":
            links = "<a href='http://[x'>unbalanced</a> <a href='http://[nohost]/'>bracketed</a>"
            body_html = f"<h1>Bad links</h1><p>Links no parser accepts. {links}</p>"
            return _Answer(200, _page("Bad links", body_html + "<a href='/page/ada-brisk'>Ada</a>"))
        if path == "/lone-surrogate":
            script = (
                "<script>document.getElementById('s').textContent = "
                "'A lone ' + String.fromCharCode(0xD800) + ' surrogate in the text.';</script>"
            )
            return _Answer(200, _page("Lone surrogate", f"<p id='s'>loading</p>{script}"))
        if path == "/api/odd":
            # json.dumps escapes the lone surrogates: valid JSON that decodes to ill-formed text
            odd = {"title": "Broken \ud800 title", "url": site.url + "/page/zorbania?\udfff"}
            results = [{**odd, "content": "a snippet with \udbff in it"}]
            return _Answer(200, json.dumps({"results": results}).encode(), "application/json")
        if path == "/api/deep":
            depth = 200_000
            return _Answer(200, b"[" * depth + b"]" * depth, "application/json")
        if path == "/echo-host":
            return _Answer(200, (_header(scope, b"host") or "").encode(), "text/plain")
        if path == "/huge":
            paragraph = "<p>" + "filler words about nothing in particular " * 25 + "</p>"
            body_html = "<p>HUGE PAGE START</p>" + paragraph * (site.huge_bytes // len(paragraph))
            return _Answer(200, _page("Huge page", body_html))
        if path == "/file.bin":
            return _Answer(200, BINARY_BYTES, "application/octet-stream")
        if path == "/notes.txt":
            notes = b"Notes: Quillton has 3 bridges.\nThe mayor is Oren Vale.\n"
            return _Answer(200, notes, "text/plain; charset=utf-8")
        if path == "/":
            welcome = "<p>Welcome. Try <a href='/search?q=zorbania'>a search</a>.</p>"
            return _Answer(200, _page("LocalSite", welcome))
        not_found = f"<h1>Not Found</h1><p>No page at {html.escape(path)}.</p>"
        return _Answer(404, _page("404 Not Found", not_found))


class LocalSite:
    """The site on 127.0.0.1 (``port``, 0: a free one), served from a thread by uvicorn with the
    guards of ``memrl.envs.asgi``; use as a context manager or call ``close``.

    Args:
        slow_delay_s: how long ``/slow`` takes to answer (``/slow?delay=S``: S seconds).
        huge_bytes: about the size of ``/huge``.
        api_key: the key ``/api/search`` wants in ``X-API-KEY``.
        port: TCP port on 127.0.0.1; 0 picks a free one (see ``url``).
        header_timeout_s: longest a connection may wait for a request's headers.
        max_connections: most connections open at once (default: ``ASGIServer``'s).

    Raises:
        ValueError: the port is out of range or in use (``memrl.envs.asgi.bind``).
    """

    def __init__(
        self,
        slow_delay_s: float = 6.0,
        huge_bytes: int = 12_000_000,
        api_key: str = "test-key-0123",
        port: int = 0,
        *,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        max_connections: int | None = None,
    ) -> None:
        self.slow_delay_s = slow_delay_s
        self.huge_bytes = huge_bytes
        self.api_key = api_key
        self.hits: Counter[str] = Counter()
        sock = bind("127.0.0.1", port)
        try:
            server = ASGIServer(
                _SiteApp(self),
                sock,
                name="memrl-local-site",
                header_timeout_s=header_timeout_s,
                max_connections=max_connections,
                protocol_mixin=_WritesNul,
            )
        except BaseException:
            sock.close()
            raise
        self._server = server.start()

    @property
    def url(self) -> str:
        return self._server.url

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
        """Stops serving and closes the socket."""
        self._server.stop()

    def __enter__(self) -> LocalSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
