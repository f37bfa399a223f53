"""URL safety (schemes, host lists, address classes after DNS) and per-host politeness.

``UrlPolicy.resolve`` is the one gate: the filtering proxy (``proxy.py``) calls it for every
request the browser or the HTTP client makes, redirects included, and connects to the address it
vetted, so a second DNS answer cannot slip a private address in between check and connect.

IPv6 forms that carry an IPv4 address are judged by it, since a translator or a dual-stack
socket may deliver them there: IPv4-mapped addresses (``::ffff:a.b.c.d``) count as the IPv4
address itself; NAT64 (``64:ff9b::/96``) and 6to4 (``2002::/16``) addresses pass only when the
IPv4 address they embed is global; the deprecated IPv4-compatible (``::a.b.c.d``) and
IPv4-translated (``::ffff:0:a.b.c.d``) forms, local-use NAT64 (``64:ff9b:1::/48``) and
site-local addresses (``fec0::/10``) are never global.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import SplitResult, urljoin, urlsplit

from memrl.envs.web_search.config import SafetyConfig

ALLOWED_SCHEMES = ("http", "https")

_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")


class UrlDenied(Exception):
    """A URL or host that the safety policy refuses; the message says why."""


def split_url(url: str) -> SplitResult | None:
    """``urlsplit`` for URLs from the web: None where the standard library raises (unbalanced
    brackets, a bracketed host that is no IPv6 address), so page content cannot crash a reader."""
    try:
        parts = urlsplit(url)
        parts.hostname  # noqa: B018 (parsed lazily; raises for "http://[x]/")
    except ValueError:
        return None
    return parts


def join_url(base: str, link: str) -> str | None:
    """``urljoin`` for links and redirects from the web: None for what cannot be parsed."""
    try:
        url = urljoin(base, link)
    except ValueError:
        return None
    return url if split_url(url) is not None else None


def host_of(url: str) -> str:
    """The lower-cased host of a URL, or "" when it has none or cannot be parsed."""
    parts = split_url(url)
    return (parts.hostname or "") if parts is not None else ""


@dataclass(frozen=True)
class Vetted:
    """A host that passed the policy, with the address to connect to."""

    host: str
    port: int
    address: str


def _matches(host: str, patterns: tuple[str, ...]) -> bool:
    for pattern in patterns:
        pattern = pattern.lower().rstrip(".")
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False


class UrlPolicy:
    """Decides whether a URL may be fetched."""

    def __init__(self, config: SafetyConfig) -> None:
        self.config = config
        self._allowed_nets = []
        for item in config.allow_addresses:
            try:
                self._allowed_nets.append(ipaddress.ip_network(item, strict=False))
            except ValueError as err:
                raise ValueError(
                    f"safety.allow_addresses has {item!r}, which is not an IP address or network "
                    "(e.g. '127.0.0.1' or '10.0.0.0/8')"
                ) from err

    def check_url(self, url: str) -> tuple[str, int]:
        """Checks scheme and host lists (no DNS); returns (host, port).

        Raises:
            UrlDenied: the URL is malformed, the scheme is not http(s), there is no host, or a
                host list refuses it.
        """
        parts = split_url(url)
        if parts is None:  # brackets that hold no IPv6 address, unbalanced brackets
            raise UrlDenied(f"URL {url[:100]!r} is malformed (its host cannot be parsed)")
        hostname = parts.hostname
        scheme = parts.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise UrlDenied(f"scheme {scheme or '(none)'!r} is not allowed (only http and https)")
        host = (hostname or "").lower().rstrip(".")
        if not host:
            raise UrlDenied(f"URL {url!r} has no host")
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError as err:
            raise UrlDenied(f"URL {url!r} has an invalid port") from err
        self.check_host(host, port)
        return host, port

    def check_host(self, host: str, port: int) -> None:
        """Host lists and ports, before any DNS lookup."""
        host = host.lower().rstrip(".")
        if _matches(host, self.config.deny_hosts):
            raise UrlDenied(f"host {host!r} is on the deny list")
        if self.config.allow_hosts and not _matches(host, self.config.allow_hosts):
            raise UrlDenied(f"host {host!r} is not on the allow list")
        if self.config.allowed_ports and port not in self.config.allowed_ports:
            raise UrlDenied(
                f"port {port} is not allowed (allowed: {list(self.config.allowed_ports)})"
            )

    def check_address(self, host: str, address: str) -> None:
        """Refuses non-global addresses unless allowed explicitly."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip in net for net in self._allowed_nets) or self.config.allow_private:
            return
        if isinstance(ip, ipaddress.IPv6Address):
            form, embedded = _ipv4_form(ip)
            if form:
                kind = _kind(embedded) if embedded is not None else ""
                inner = (
                    f" (it embeds the {kind + ' ' if kind else ''}IPv4 address {embedded})"
                    if embedded is not None
                    else ""
                )
                if embedded is None or form not in ("NAT64", "6to4") or kind:
                    raise UrlDenied(
                        f"host {host!r} resolves to {form} address {ip}{inner}, which is denied"
                    )
                return
        kind = _kind(ip)
        if kind:
            raise UrlDenied(f"host {host!r} resolves to {kind} address {ip}, which is denied")

    def fingerprint(self) -> str:
        """A short digest of the safety config: what was fetched under one policy is cached
        under its fingerprint, so a stricter policy never reads a laxer one's pages."""
        fields = dataclasses.asdict(self.config)
        payload = json.dumps(fields, sort_keys=True, default=list)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def resolve(self, host: str, port: int) -> Vetted:
        """Host checks, DNS, and the address check of every answer; returns one vetted address.

        Raises:
            UrlDenied: refused by a list, unresolvable, or any resolved address is refused.
        """
        self.check_host(host, port)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as err:
            raise UrlDenied(f"host {host!r} does not resolve ({err})") from err
        addresses = list(dict.fromkeys(info[4][0] for info in infos))
        for address in addresses:
            self.check_address(host, address)
        return Vetted(host=host, port=port, address=addresses[0])


def _kind(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Why an address is not global (e.g. "loopback"), or "" for a global unicast address."""
    if ip.is_global and not ip.is_multicast:
        return ""
    for kind in ("unspecified", "loopback", "link-local", "private", "multicast"):
        if getattr(ip, f"is_{kind.replace('-', '_')}"):
            return kind
    return "non-global"


def _ipv4_form(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address | None]:
    """The IPv4-carrying form of an IPv6 address and the IPv4 address inside, or ("", None)."""
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are judged as themselves
        return "IPv4-compatible", low32
    if ip in _IPV4_TRANSLATED:
        return "IPv4-translated", low32
    if ip in _NAT64:
        return "NAT64", low32
    if ip in _NAT64_LOCAL:
        return "local-use NAT64", None
    if ip in _SIX_TO_FOUR:
        return "6to4", ip.sixtofour
    if ip in _SITE_LOCAL:
        return "site-local", None
    return "", None


class HostRateLimiter:
    """At most one request per ``min_interval_s`` per host (thread-safe; callers sleep)."""

    def __init__(self, min_interval_s: float) -> None:
        self.min_interval_s = min_interval_s
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait(self, host: str) -> float:
        """Blocks until the host may be contacted again; returns the seconds waited."""
        if self.min_interval_s <= 0:
            return 0.0
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next.get(host, 0.0))
            self._next[host] = start + self.min_interval_s
        delay = start - now
        if delay > 0:
            time.sleep(delay)
        return delay
