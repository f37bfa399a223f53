"""WebShop as a real web site: the engine's pages rendered as HTML forms over HTTP.

An ASGI app (``WebShopApp``, Starlette requests and responses) served by uvicorn
(``memrl.envs.asgi``): form bodies are capped at ``MAX_FORM_BYTES`` and must arrive within a
deadline; ``HEAD`` and ``OPTIONS`` are answered. Routes:

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
from typing import Any
from urllib.parse import parse_qs, quote

from memrl.envs.asgi import BODY_TIMEOUT_S, ASGIServer, BodyError, bind, read_body
from memrl.envs.webshop.engine import Element, Session, WebShopEngine

logger = logging.getLogger(__name__)

MAX_FORM_BYTES = 64 * 1024
"""Largest form body the site reads (a search box and a button)."""

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


class WebShopApp:
    """The ASGI application of a site (routes in the module docstring).

    Args:
        site: the sessions and their pages.
        body_timeout_s: longest a client may take to send a form (then 408).
    """

    def __init__(self, site: WebShopSite, body_timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.site = site
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        from starlette.requests import Request

        if scope["type"] != "http":
            return
        response = await self._route(Request(scope, receive))
        await response(scope, receive, send)

    async def _route(self, request: Any):
        from starlette.concurrency import run_in_threadpool

        site, method = self.site, request.method
        parts = [p for p in request.url.path.split("/") if p]
        allowed = _allowed(parts)
        if allowed is None or (parts[:1] == ["s"] and parts[1] not in site.sessions):
            return _html(404, "<p>No such page or session. <a href='/'>Start shopping</a></p>")
        if method == "OPTIONS":
            return _response(204, b"", "text/plain", {"allow": ", ".join(allowed)})
        if method not in allowed:
            return _html(405, "<p>Method not allowed.</p>", {"allow": ", ".join(allowed)})
        try:
            if not parts:
                goal = request.query_params.get("goal")
                sid = site.new_session(int(goal) if goal is not None else None)
                return _redirect(f"/s/{sid}")
            sid = parts[1]
            if len(parts) == 2:
                return _html(200, await run_in_threadpool(site.render, sid))
            if parts[2] == "state.json":
                body = json.dumps(site.state(sid)).encode("utf-8")
                return _response(200, body, "application/json")
            if method == "POST":
                form = await self._form(request)
            else:
                form = parse_qs(request.url.query)
            if parts[2] == "search":
                action = f"search[{form.get('search_query', [''])[0]}]"
            else:
                action = f"click[{form.get('element', [''])[0]}]"
            await run_in_threadpool(site.act, sid, action)
            return _redirect(f"/s/{sid}")
        except BodyError as err:
            return _html(err.status, f"<p>{html.escape(str(err))}</p>", {"connection": "close"})
        except (ValueError, KeyError) as err:  # a bad goal number; a session dropped meanwhile
            return _html(HTTPStatus.BAD_REQUEST, f"<p>{html.escape(str(err))}</p>")

    async def _form(self, request: Any) -> dict[str, list[str]]:
        body = await read_body(request, MAX_FORM_BYTES, self.body_timeout_s)
        return parse_qs(body.decode("utf-8", "replace"))


def _allowed(parts: list[str]) -> tuple[str, ...] | None:
    """The methods a path takes, or None for a path the site does not have."""
    if not parts:
        return ("GET", "HEAD", "OPTIONS")
    if parts[0] != "s" or len(parts) < 2 or len(parts) > 3:
        return None
    if len(parts) == 2 or parts[2] == "state.json":
        return ("GET", "HEAD", "OPTIONS")
    return {"search": ("POST", "OPTIONS"), "click": ("GET", "HEAD", "POST", "OPTIONS")}.get(
        parts[2]
    )


def _response(status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None):
    from starlette.responses import Response

    return Response(
        body,
        status_code=int(status),
        media_type=ctype,
        headers={"cache-control": "no-store", **(headers or {})},
    )


def _html(status: int, body: str, headers: dict[str, str] | None = None):
    return _response(status, body.encode("utf-8"), "text/html", headers)


def _redirect(location: str):
    return _response(HTTPStatus.SEE_OTHER, b"", "text/plain", {"location": location})


def start_server(
    site: WebShopSite, host: str = "127.0.0.1", port: int = 0, *, sock: Any = None
) -> ASGIServer:
    """Serves a site from a daemon thread; ``port=0`` picks a free port (see ``server.url``).

    Raises:
        ValueError: the port is out of range or in use (``memrl.envs.asgi.bind``).
    """
    server = ASGIServer(WebShopApp(site), sock or bind(host, port), name="webshop-http").start()
    logger.info("WebShop site on %s/", server.url)
    return server
