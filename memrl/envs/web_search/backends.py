"""Search backends: HTML results pages (read in the browser, parsed by CSS selectors), SearXNG
(HTML or JSON) and HTTP JSON search APIs (Serper-style).

An HTML engine is five strings (URL template and four CSS selectors), so adding one is a config
entry, not code. API keys are read from environment variables at request time and never logged
or stored in the cache key.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote_plus, urlsplit

from memrl.envs.text import clean_text
from memrl.envs.web_search.api_client import HttpClient, HttpError
from memrl.envs.web_search.browser import Loaded
from memrl.envs.web_search.config import SearchConfig, from_dict
from memrl.envs.web_search.policy import join_url, split_url

logger = logging.getLogger(__name__)


class SearchFailed(Exception):
    """A search that produced no result list; ``transient`` says whether a retry may help."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str = ""


PageLoader = Callable[[str], Loaded]


@dataclass(frozen=True)
class HtmlBackend:
    """An HTML results page read in the browser and parsed with CSS selectors."""

    url_template: str
    """Results URL with ``{query}`` (URL-encoded), e.g. ``https://html.duckduckgo.com/html/?q={query}``."""
    result_selector: str
    """Selects one element per result."""
    title_selector: str
    """Inside a result: the title element."""
    link_selector: str
    """Inside a result: the ``<a>`` whose href is the result URL."""
    snippet_selector: str = ""
    """Inside a result: the snippet element ('' for none)."""
    unwrap_param: str = ""
    """Query parameter that holds the real URL when links go through a redirector (``uddg``)."""
    name: str = "html"
    """Shown in logs and part of cache keys."""

    def cache_request(self, query: str) -> dict[str, Any]:
        return {"kind": "search", "backend": self.name, "url": self.url_template, "query": query}

    def search(self, query: str, load: PageLoader, http: HttpClient) -> list[SearchResult]:
        loaded = load(self.url_template.format(query=quote_plus(query)))
        if loaded.error:
            raise SearchFailed(
                f"results page: {loaded.error}",
                transient=loaded.error.startswith("browser failure"),
            )
        if loaded.status >= 400:
            raise SearchFailed(
                f"results page answered HTTP {loaded.status}",
                transient=loaded.status == 429 or loaded.status >= 500,
            )
        return parse_results(loaded.html, loaded.url or loaded.requested_url, self)


def parse_results(html: str, base_url: str, spec: HtmlBackend) -> list[SearchResult]:
    """Applies an ``HtmlBackend``'s selectors to a results page."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "lxml")
    results: list[SearchResult] = []
    seen: set[str] = set()
    for item in soup.select(spec.result_selector):
        link = item.select_one(spec.link_selector)
        if link is None or not link.get("href"):
            continue
        url = join_url(base_url, str(link["href"]))
        if url is not None and spec.unwrap_param:
            wrapped = parse_qs(urlsplit(url).query).get(spec.unwrap_param)
            if wrapped:
                url = wrapped[0]
        parts = split_url(url) if url is not None else None
        if parts is None or parts.scheme not in ("http", "https") or url in seen:
            continue
        seen.add(url)
        title_el = item.select_one(spec.title_selector)
        snippet_el = item.select_one(spec.snippet_selector) if spec.snippet_selector else None
        results.append(
            SearchResult(
                title=" ".join((title_el or link).get_text(" ").split()),
                url=url,
                snippet=" ".join(snippet_el.get_text(" ").split()) if snippet_el else "",
            )
        )
    return results


def _dig(value: Any, path: str) -> Any:
    for part in [p for p in path.split(".") if p]:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


@dataclass(frozen=True)
class JsonApiBackend:
    """An HTTP JSON search API: Serper, SearXNG's ``format=json``, Brave's API and the like."""

    url: str
    """Endpoint URL."""
    method: str = "POST"
    """``POST`` sends a JSON body, ``GET`` query parameters."""
    query_field: str = "q"
    """Name of the query parameter/field."""
    count_field: str = "num"
    """Name of the result-count parameter ('' to omit)."""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Further fixed parameters (e.g. ``{"format": "json"}``)."""
    api_key_env: str = ""
    """Environment variable holding the API key ('' for none). The key is never logged."""
    api_key_header: str = "X-API-KEY"
    """Header that carries the key."""
    results_path: str = "organic"
    """Dotted path to the result list in the response."""
    title_field: str = "title"
    url_field: str = "link"
    snippet_field: str = "snippet"
    name: str = "json_api"
    """Shown in logs and part of cache keys."""

    def __hash__(self) -> int:
        return hash((self.url, self.method, self.name))

    def cache_request(self, query: str) -> dict[str, Any]:
        return {
            "kind": "search",
            "backend": self.name,
            "url": self.url,
            "query": query,
            "extra": self.extra,
        }

    def search(self, query: str, load: PageLoader, http: HttpClient) -> list[SearchResult]:
        headers = {}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "")
            if not key:
                raise SearchFailed(
                    f"search backend {self.name!r} needs an API key in the environment variable "
                    f"{self.api_key_env}, which is not set"
                )
            headers[self.api_key_header] = key
        fields = {self.query_field: query, **self.extra}
        if self.count_field:
            fields[self.count_field] = 10
        try:
            if self.method.upper() == "GET":
                resp = http.request("GET", self.url, params=fields, headers=headers)
            else:
                resp = http.request("POST", self.url, json_body=fields, headers=headers)
        except HttpError as err:
            raise SearchFailed(str(err), transient=err.transient) from err
        if resp.status >= 400:
            raise SearchFailed(
                f"search API answered HTTP {resp.status}",
                transient=resp.status == 429 or resp.status >= 500,
            )
        try:
            items = _dig(resp.json(), self.results_path)
        except ValueError as err:
            raise SearchFailed(f"search API did not return JSON ({err})") from err
        if not isinstance(items, list):
            raise SearchFailed(f"search API response has no list at {self.results_path!r}")
        results = []
        for item in items:
            url = _dig(item, self.url_field) if isinstance(item, dict) else None
            url = clean_text(url) if isinstance(url, str) else None  # JSON may hold "\ud800"
            parts = split_url(url) if url is not None else None
            if parts is None or parts.scheme not in ("http", "https"):
                continue
            results.append(
                SearchResult(
                    title=clean_text(str(_dig(item, self.title_field) or url)),
                    url=url,
                    snippet=clean_text(str(_dig(item, self.snippet_field) or "")),
                )
            )
        return results


Backend = HtmlBackend | JsonApiBackend

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    # HTML engines. Selectors follow each engine's markup as documented at the time of writing;
    # engines change it, so every field can be overridden under search.options.
    "duckduckgo": (
        "html",
        {
            "url_template": "https://html.duckduckgo.com/html/?q={query}",
            "result_selector": "div.result",
            "title_selector": "a.result__a",
            "link_selector": "a.result__a",
            "snippet_selector": ".result__snippet",
            "unwrap_param": "uddg",
        },
    ),
    "bing": (
        "html",
        {
            "url_template": "https://www.bing.com/search?q={query}",
            "result_selector": "li.b_algo",
            "title_selector": "h2",
            "link_selector": "h2 a",
            "snippet_selector": ".b_caption p",
        },
    ),
    "mojeek": (
        "html",
        {
            "url_template": "https://www.mojeek.com/search?q={query}",
            "result_selector": "ul.results-standard > li",
            "title_selector": "h2 a",
            "link_selector": "h2 a",
            "snippet_selector": "p.s",
        },
    ),
    "searxng_html": (
        "html",
        {
            "url_template": "http://localhost:8888/search?q={query}",
            "result_selector": "article.result",
            "title_selector": "h3",
            "link_selector": "h3 a",
            "snippet_selector": "p.content",
        },
    ),
    "searxng_json": (
        "json_api",
        {
            "url": "http://localhost:8888/search",
            "method": "GET",
            "count_field": "",
            "extra": {"format": "json"},
            "results_path": "results",
            "url_field": "url",
            "snippet_field": "content",
        },
    ),
    "serper": (
        "json_api",
        {
            "url": "https://google.serper.dev/search",
            "api_key_env": "SERPER_API_KEY",
            "api_key_header": "X-API-KEY",
            "results_path": "organic",
        },
    ),
    "brave_api": (
        "json_api",
        {
            "url": "https://api.search.brave.com/res/v1/web/search",
            "method": "GET",
            "count_field": "count",
            "api_key_env": "BRAVE_API_KEY",
            "api_key_header": "X-Subscription-Token",
            "results_path": "web.results",
            "url_field": "url",
            "snippet_field": "description",
        },
    ),
}
"""Named backends; ``search.options`` overrides their fields (``searxng_*``: set ``url`` /
``url_template`` to your instance)."""

_KINDS: dict[str, type] = {"html": HtmlBackend, "json_api": JsonApiBackend}


def build_backend(config: SearchConfig) -> Backend:
    """A backend from a preset name or a kind (``html``, ``json_api``) plus options."""
    name = config.backend
    if name in PRESETS:
        kind, options = PRESETS[name]
        options = {"name": name, **options, **config.options}
    elif name in _KINDS:
        kind, options = name, {"name": name, **config.options}
    else:
        raise ValueError(
            f"Unknown search.backend {name!r}. Available presets: {sorted(PRESETS)}; kinds: "
            f"{sorted(_KINDS)} (give their fields under search.options)."
        )
    try:
        return from_dict(_KINDS[kind], options, f"search.options (backend {name!r})")
    except TypeError as err:
        raise ValueError(f"search.options for backend {name!r} is incomplete: {err}") from err
