"""Typed configs of the web-search stack: browser pool, URL safety, fetching, cache and search.

Every component takes one frozen dataclass; ``from_dict`` maps the plain dicts of an env config
(YAML) onto them and rejects unknown keys, naming the key and the allowed ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_CHROME_FLAGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Start flags that work on Debian's chromium in containers (no sandbox, no /dev/shm, no GPU)."""


@dataclass(frozen=True)
class BrowserConfig:
    """One pool of headless Chromium browsers (per env runner process)."""

    pool_size: int = 1
    """Browsers in the pool; envs of one process share it."""
    chromium_path: str = "/usr/bin/chromium"
    """Chromium binary (Debian package ``chromium``)."""
    chromedriver_path: str = "/usr/bin/chromedriver"
    """Driver binary (Debian package ``chromium-driver``); passed explicitly so Selenium Manager
    never downloads one."""
    flags: tuple[str, ...] = DEFAULT_CHROME_FLAGS
    """Chromium start flags; a fresh ``--user-data-dir`` and the proxy flags are always added."""
    window_size: tuple[int, int] = (1280, 1024)
    """Viewport in pixels."""
    start_timeout_s: float = 30.0
    """Longest a browser start may take before it counts as failed."""
    hang_grace_s: float = 10.0
    """Seconds past an operation's own timeouts before the watchdog kills the browser as hung."""
    reap_orphans: bool = True
    """Make this process a child subreaper (Linux) so Chromium's daemonized helpers are reaped
    here on shutdown instead of lingering as zombies under PID 1."""


@dataclass(frozen=True)
class SafetyConfig:
    """Which URLs the browser and the HTTP client may reach."""

    allow_hosts: tuple[str, ...] = ()
    """If non-empty, only these hosts (``example.com`` exact, ``*.example.com`` its subdomains,
    ``8.8.8.8`` that address in any spelling or IPv6 form that carries only it)."""
    deny_hosts: tuple[str, ...] = ()
    """Hosts never reached (same patterns; an IP entry also refuses every host that resolves to
    it or to an IPv6 form that carries it); checked before ``allow_hosts``."""
    allow_private: bool = False
    """Allow private, loopback, link-local and other non-global addresses (off: SSRF guard)."""
    allow_addresses: tuple[str, ...] = ()
    """Addresses or networks allowed even when non-global, e.g. ``("127.0.0.1",)`` in tests."""
    allowed_ports: tuple[int, ...] = ()
    """If non-empty, the only ports that may be contacted."""
    max_page_bytes: int = 4_000_000
    """Cap on the bytes of one response (and one HTTPS tunnel); the rest is cut."""


@dataclass(frozen=True)
class FetchConfig:
    """Timeouts, retries, politeness and what a page read keeps."""

    page_load_timeout_s: float = 15.0
    """Cap on one page load in the browser (the load event)."""
    settle_quiet_ms: int = 500
    """The DOM counts as settled after this long without mutations (JS-built content)."""
    settle_max_ms: int = 4000
    """Longest wait for the DOM to settle after the load event."""
    http_timeout_s: float = 15.0
    """Socket timeout of HTTP JSON requests."""
    retries: int = 2
    """Extra attempts after a transient failure (crash, connection error, HTTP 429/5xx)."""
    backoff_s: float = 0.5
    """First retry delay; doubles each retry."""
    min_host_interval_s: float = 1.0
    """Politeness: at least this long between two requests of ours to the same host."""
    max_html_chars: int = 3_000_000
    """Cap on the HTML taken from the DOM for extraction."""
    max_page_tokens: int = 600
    """Token budget of a page observation (whitespace tokens)."""
    max_links: int = 10
    """Links listed under a page."""
    max_results: int = 5
    """Search results listed per query."""
    user_agent: str = ""
    """User-Agent override for browser and HTTP client ('' keeps the default)."""


@dataclass(frozen=True)
class CacheConfig:
    """Content-addressed on-disk cache of search results and pages."""

    mode: str = "readwrite"
    """``readwrite`` (use and fill), ``replay`` (only the cache; never the network) or ``off``."""
    path: str = "~/.cache/memrl/web"
    """Directory of ``blobs/`` and ``index.sqlite``."""

    def __post_init__(self) -> None:
        if self.mode not in CACHE_MODES:
            raise ValueError(
                f"cache.mode={self.mode!r} is not one of {list(CACHE_MODES)}; use 'readwrite' "
                "to fill the cache, 'replay' to run offline from it, 'off' to bypass it."
            )


CACHE_MODES = ("readwrite", "replay", "off")


@dataclass(frozen=True)
class SearchConfig:
    """Which search backend answers ``<search>`` actions (see ``backends.py``)."""

    backend: str = "duckduckgo"
    """A preset name (``backends.PRESETS``) or a kind: ``html``, ``searxng_html``,
    ``searxng_json``, ``json_api``."""
    options: dict[str, Any] = field(default_factory=dict)
    """Overrides of the preset's fields (URL template, CSS selectors, API key variable...)."""


def from_dict(cls: type[T], value: T | dict[str, Any] | None, where: str) -> T:
    """Builds a config dataclass from a dict, rejecting unknown keys.

    Args:
        cls: the dataclass.
        value: an instance (returned as is), a dict of its fields, or None (defaults).
        where: the config key, for error messages (e.g. ``"browser"``).
    """
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"{where} must be a dict of {cls.__name__} fields, got {value!r}")
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise ValueError(f"Unknown key(s) {unknown} under {where}. Allowed: {names}")
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    return cls(**kwargs)
