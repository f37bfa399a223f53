"""WebShop as a real web site: the engine's pages rendered as HTML forms over HTTP.

Standard library only (``http.server.ThreadingHTTPServer``). Routes:

- ``GET /`` : a new session for a random goal of the split, or ``GET /?goal=I`` for the I-th goal
  of the split; redirects to the session page;
- ``GET /s/SID`` : the session's current page (search box, results, item with options, sub-page,
  or the done page with ``<span id="reward">``);
- ``POST /s/SID/search`` (form field ``search_query``) and ``POST|GET /s/SID/click`` (field
  ``element``, what ``click[...]`` takes): the engine's actions, then a redirect back
  (post/redirect/get). Invalid clicks are no-ops, as in the text env;
- ``GET /s/SID/state.json`` : page, asin, options, done and reward (for tests and tools).

Every page carries the same elements the text observation is made of, so an agent sees the
same shop in a browser as in text. No external resources are referenced (no CDN, no images).
"""

from __future__ import annotations

import html
import json
import logging
import random
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlparse

from memrl.envs.webshop.engine import Element, Session, WebShopEngine

logger = logging.getLogger(__name__)

_STYLE = """
body{font-family:sans-serif;margin:2em;max-width:60em}
#instruction-text{background:#eef;padding:.5em 1em;margin-bottom:1em}
form{display:inline-block;margin:.2em}
.grid-item{border:1px solid #ccc;padding:.5em;margin:.5em 0}
.radio-toolbar label{margin-right:1em}
.option-group{margin:.5em 0}
"""


class WebShopSite:
    """Sessions of one engine, rendered as HTML (the oldest are dropped past ``max_sessions``)."""

    def __init__(
        self, engine: WebShopEngine, goal_indices: range, seed: int = 0, max_sessions: int = 10_000
    ) -> None:
        self.engine = engine
        self.max_sessions = max_sessions
        self.goal_indices = goal_indices
        self.sessions: dict[str, tuple[Session, threading.Lock]] = {}
        self._lock = threading.Lock()
        self._rng = random.Random(seed)

    def new_session(self, goal: int | None = None) -> str:
        """Starts a session for the goal-th goal of the split (random when None)."""
        with self._lock:
            if goal is None:
                goal = self._rng.randrange(len(self.goal_indices))
            if not 0 <= goal < len(self.goal_indices):
                raise ValueError(f"goal must be in 0..{len(self.goal_indices) - 1}, got {goal}")
            while len(self.sessions) >= self.max_sessions:
                del self.sessions[next(iter(self.sessions))]
            sid = secrets.token_hex(8)
            world_goal = self.engine.world.goal(self.goal_indices[goal])
            self.sessions[sid] = (self.engine.new_session(world_goal, sid), threading.Lock())
            return sid

    def act(self, sid: str, action: str) -> None:
        session, lock = self.sessions[sid]
        with lock:
            self.engine.step(session, action)

    def state(self, sid: str) -> dict[str, Any]:
        s, _ = self.sessions[sid]
        return {
            "page": s.page,
            "asin": s.asin,
            "options": s.options,
            "done": s.done,
            "reward": s.reward,
            "reward_info": s.reward_info,
            "instruction": s.goal["instruction_text"],
        }

    def render(self, sid: str) -> str:
        session, lock = self.sessions[sid]
        with lock:
            elements = self.engine.elements(session)
            page, done, reward = session.page, session.done, session.reward
        base = f"/s/{sid}"
        body: list[str] = []
        i = 0
        while i < len(elements):
            e = elements[i]
            if e.kind == "option":
                group = [x for x in elements[i:] if x.kind == "option" and x.group == e.group]
                body.append(self._option_group(base, e.group, group))
                i += len(group)
            elif e.kind == "link":
                # A result: the asin link, then the title and the price.
                title, price = elements[i + 1].text, elements[i + 2].text
                href = f"{base}/click?element={quote(e.value)}"
                body.append(
                    f"<div class='grid-item'><a class='product-link' href='{href}'>"
                    f"{html.escape(e.text)}</a><h4 class='product-title'>"
                    f"{html.escape(title)}</h4><h5 class='product-price'>"
                    f"{html.escape(price)}</h5></div>"
                )
                i += 3
            elif e.text == "Instruction:" and e.kind == "text":
                body.append(
                    "<div id='instruction-text'><h4>Instruction:</h4><h4 id='instruction'>"
                    f"{html.escape(elements[i + 1].text)}</h4></div>"
                )
                i += 2
            else:
                body.append(self._element(base, e))
                i += 1
        if done:
            body.append(f'<p>Reward: <span id="reward">{reward!r}</span></p>')
        return (
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>WebShop</title>"
            f"<link rel='icon' href='data:,'><style>{_STYLE}</style></head>"
            f"<body data-page='{page}'>" + "\n".join(body) + "</body></html>"
        )

    def _element(self, base: str, e: Element) -> str:
        text = html.escape(e.text)
        if e.kind == "search":
            return (
                f"<form method='post' action='{base}/search' id='search-form'>"
                "<input id='search_input' type='text' name='search_query' "
                "placeholder='Search...' required>"
                f"<button type='submit' class='btn' id='search-button'>{text}</button></form>"
            )
        if e.kind == "button":
            return (
                f"<form method='post' action='{base}/click'>"
                f"<button type='submit' class='btn' name='element' "
                f"value='{html.escape(e.value, quote=True)}'>{text}</button></form>"
            )
        return f"<p>{text}</p>"

    def _option_group(self, base: str, name: str, options: list[Element]) -> str:
        parts = [
            f"<div class='option-group'><h4>{html.escape(name)}</h4>"
            f"<form method='post' action='{base}/click' class='radio-toolbar'>"
        ]
        for j, o in enumerate(options):
            oid = f"radio_{html.escape(name, quote=True).replace(' ', '_')}{j}"
            checked = " checked" if o.selected else ""
            parts.append(
                f"<input type='radio' id='{oid}' name='element' "
                f"value='{html.escape(o.value, quote=True)}'{checked} "
                "onchange='this.form.submit()'>"
                f"<label for='{oid}'>{html.escape(o.text)}</label>"
            )
        parts.append("</form></div>")
        return "".join(parts)


def make_handler(site: WebShopSite) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to a site."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "memrl-webshop/1"

        def log_message(self, fmt: str, *args: Any) -> None:
            logger.debug("%s - " + fmt, self.address_string(), *args)

        def _send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8") -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def _redirect(self, location: str) -> None:
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _form(self) -> dict[str, list[str]]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode("utf-8") if length else ""
            return parse_qs(raw)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._route("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._route("POST")

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            parts = [p for p in url.path.split("/") if p]
            try:
                if not parts and method == "GET":
                    goal = int(query["goal"][0]) if "goal" in query else None
                    self._redirect(f"/s/{site.new_session(goal)}")
                    return
                if len(parts) < 2 or parts[0] != "s" or parts[1] not in site.sessions:
                    self._send(
                        HTTPStatus.NOT_FOUND,
                        "<p>No such page or session. <a href='/'>Start shopping</a></p>",
                    )
                    return
                sid = parts[1]
                if len(parts) == 2 and method == "GET":
                    self._send(HTTPStatus.OK, site.render(sid))
                elif parts[2:] == ["state.json"]:
                    self._send(HTTPStatus.OK, json.dumps(site.state(sid)), "application/json")
                elif parts[2:] == ["search"] and method == "POST":
                    keywords = self._form().get("search_query", [""])[0]
                    site.act(sid, f"search[{keywords}]")
                    self._redirect(f"/s/{sid}")
                elif parts[2:] == ["click"]:
                    fields = self._form() if method == "POST" else query
                    site.act(sid, f"click[{fields.get('element', [''])[0]}]")
                    self._redirect(f"/s/{sid}")
                else:
                    self._send(HTTPStatus.NOT_FOUND, "<p>Unknown route.</p>")
            except ValueError as err:
                self._send(HTTPStatus.BAD_REQUEST, f"<p>{html.escape(str(err))}</p>")

    return Handler


def start_server(
    site: WebShopSite, host: str = "127.0.0.1", port: int = 0
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Serves a site from a daemon thread; ``port=0`` picks a free port (``server.server_port``)."""
    server = ThreadingHTTPServer((host, port), make_handler(site))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="webshop-http", daemon=True)
    thread.start()
    logger.info("WebShop site on http://%s:%d/", host, server.server_port)
    return server, thread
