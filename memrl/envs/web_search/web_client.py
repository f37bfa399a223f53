"""``WebClient``: search and page reading with cache, politeness, retries and the URL policy.

This is the env's only door to the web. Its two calls never raise for web failures: a timeout,
a 404, a crashed browser or a denied URL comes back as an outcome whose ``error`` the env shows
to the agent.

The URL policy comes before the cache: a page's URL is checked (scheme, host lists, ports, literal
addresses) before the cache is read, and every cache entry is keyed by the policy's fingerprint,
so a client never reads what a laxer policy fetched into a shared cache directory.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import time
from dataclasses import dataclass, field

from memrl.envs.text import clean_text
from memrl.envs.web_search.api_client import HttpClient
from memrl.envs.web_search.backends import SearchFailed, SearchResult, build_backend
from memrl.envs.web_search.browser import Loaded
from memrl.envs.web_search.cache import WebCache
from memrl.envs.web_search.config import (
    BrowserConfig,
    CacheConfig,
    FetchConfig,
    SafetyConfig,
    SearchConfig,
)
from memrl.envs.web_search.extract import Page, extract, is_text_type
from memrl.envs.web_search.policy import HostRateLimiter, UrlDenied, UrlPolicy, host_of
from memrl.envs.web_search.pool import BrowserPool

logger = logging.getLogger(__name__)


@dataclass
class SearchOutcome:
    query: str
    results: list[SearchResult] = field(default_factory=list)
    error: str = ""
    cached: bool = False
    seconds: float = 0.0


@dataclass
class PageOutcome:
    url: str
    page: Page | None = None
    """The page (also set for HTTP errors such as 404, whose body is shown)."""
    error: str = ""
    cached: bool = False
    seconds: float = 0.0


def _transient_load_error(loaded: Loaded) -> bool:
    return (
        loaded.error.startswith("the browser could not load")
        or loaded.status == 429
        or loaded.status >= 500
    ) and not loaded.error.startswith("denied")


class WebClient:
    """Search and open pages through a shared browser pool."""

    def __init__(
        self,
        browser: BrowserConfig | None = None,
        safety: SafetyConfig | None = None,
        fetch: FetchConfig | None = None,
        cache: CacheConfig | None = None,
        search: SearchConfig | None = None,
    ) -> None:
        self.browser_config = browser or BrowserConfig()
        self.safety = safety or SafetyConfig()
        self.fetch = fetch or FetchConfig()
        self.search_config = search or SearchConfig()
        self.policy = UrlPolicy(self.safety)
        self._policy_key = self.policy.fingerprint()
        self.backend = build_backend(self.search_config)
        self.cache = WebCache(cache or CacheConfig())
        self.http = HttpClient(
            self.policy,
            self.fetch.http_timeout_s,
            self.safety.max_page_bytes,
            self.fetch.user_agent,
        )
        self.limiter = HostRateLimiter(self.fetch.min_host_interval_s)
        self._pool: BrowserPool | None = None

    @property
    def pool(self) -> BrowserPool:
        """The process-wide browser pool for these configs (started lazily)."""
        if self._pool is None:
            self._pool = BrowserPool.shared(self.browser_config, self.safety, self.fetch)
        return self._pool

    def _load(self, url: str) -> Loaded:
        """One browser load, after the policy pre-check and the host's politeness delay."""
        try:
            host, port = self.policy.check_url(url)
            self.policy.resolve(host, port)
        except UrlDenied as err:
            return Loaded(requested_url=url, error=f"denied: {err}")
        self.limiter.wait(host)
        return self.pool.load(url)

    def _http_politeness(self, url: str) -> None:
        self.limiter.wait(host_of(url))

    def search(self, query: str) -> SearchOutcome:
        """Results of a query (cached); never raises for web failures."""
        t0 = time.monotonic()
        query = clean_text(query)  # no encoder takes a lone surrogate
        request = {**self.backend.cache_request(query), "policy": self._policy_key}
        hit = self.cache.get(request)
        if hit is not None:
            results = [SearchResult(**r) for r in hit]
            return SearchOutcome(query, results, cached=True, seconds=time.monotonic() - t0)
        if self.cache.offline:
            return SearchOutcome(
                query,
                error="this query is not in the replay cache (replay mode never uses the network)",
                seconds=time.monotonic() - t0,
            )
        error = ""
        for attempt in range(self.fetch.retries + 1):
            try:
                if hasattr(self.backend, "url"):
                    self._http_politeness(self.backend.url)
                results = self.backend.search(query, self._load, self.http)
            except UrlDenied as err:
                error = f"denied: {err}"
                break
            except SearchFailed as err:
                error = str(err)
                if not err.transient:
                    break
                logger.info("search %r failed (%s); retry %d", query, err, attempt + 1)
                time.sleep(self.fetch.backoff_s * 2**attempt)
                continue
            self.cache.put(request, [dataclasses.asdict(r) for r in results])
            return SearchOutcome(query, results, seconds=time.monotonic() - t0)
        return SearchOutcome(query, error=f"search failed: {error}", seconds=time.monotonic() - t0)

    def open(self, url: str) -> PageOutcome:
        """A page's readable text (cached); never raises for web failures."""
        t0 = time.monotonic()
        try:
            self._check_literal(url)
        except UrlDenied as err:
            return PageOutcome(url, error=f"denied: {err}", seconds=time.monotonic() - t0)
        request = self._page_request(url)
        hit = self.cache.get(request)
        if hit is not None:
            error = hit.pop("error", "")
            return PageOutcome(
                url, Page.from_dict(hit), cached=True, error=error, seconds=time.monotonic() - t0
            )
        if self.cache.offline:
            return PageOutcome(
                url,
                error="this page is not in the replay cache (replay mode never uses the network)",
                seconds=time.monotonic() - t0,
            )
        loaded = Loaded(requested_url=url)
        for attempt in range(self.fetch.retries + 1):
            loaded = self._load(url)
            if not _transient_load_error(loaded) or attempt == self.fetch.retries:
                break
            logger.info(
                "open %s: %s (status %d); retry %d", url, loaded.error, loaded.status, attempt + 1
            )
            time.sleep(self.fetch.backoff_s * 2**attempt)
        outcome = self._page(url, loaded)
        outcome.seconds = time.monotonic() - t0
        return outcome

    def _page(self, url: str, loaded: Loaded) -> PageOutcome:
        if loaded.error:
            return PageOutcome(url, error=loaded.error)
        kind = loaded.content_type.split(";")[0].strip()
        if not is_text_type(kind):
            return PageOutcome(
                url,
                error=f"not a web page: the URL serves {kind}, whose text is "
                "not extracted (skipped)",
            )
        title, text, links = extract(loaded.html, loaded.url or url, self.fetch.max_links)
        page = Page(
            url=loaded.url or url,
            title=title or loaded.title,
            text=text,
            links=links,
            status=loaded.status,
            content_type=kind,
            notes=list(loaded.notes),
        )
        error = f"HTTP {loaded.status}" if loaded.status >= 400 else ""
        transient = loaded.status == 429 or loaded.status >= 500
        if not transient and not any("timed out" in note for note in loaded.notes):
            # Timed-out and server-error pages are not cached: a later visit may do better.
            stored = {**page.to_dict(), **({"error": error} if error else {})}
            self.cache.put(self._page_request(url), stored)
        return PageOutcome(url, page, error=error)

    def _page_request(self, url: str) -> dict:
        return {
            "kind": "page",
            "url": url,
            "max_links": self.fetch.max_links,
            "policy": self._policy_key,
        }

    def _check_literal(self, url: str) -> None:
        """The policy's checks that need no DNS: scheme, host lists, port, literal addresses."""
        host, _ = self.policy.check_url(url)
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return
        self.policy.check_address(host, str(address))

    def close(self) -> None:
        """Releases the browser pool reference and the cache."""
        if self._pool is not None:
            self._pool.release()
            self._pool = None
        self.cache.close()
