"""URL safety (schemes, host lists, address classes after DNS) and per-host politeness.

``UrlPolicy.resolve`` is the one gate: the filtering proxy (``proxy.py``) calls it for every
request the browser or the HTTP client makes, redirects included, and connects to the address it
vetted, so a second DNS answer cannot slip a private address in between check and connect.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from memrl.envs.web_search.config import SafetyConfig

ALLOWED_SCHEMES = ("http", "https")


class UrlDenied(Exception):
    """A URL or host that the safety policy refuses; the message says why."""


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
            UrlDenied: the scheme is not http(s), there is no host, or a host list refuses it.
        """
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise UrlDenied(f"scheme {scheme or '(none)'!r} is not allowed (only http and https)")
        host = (parts.hostname or "").lower().rstrip(".")
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
        if any(ip in net for net in self._allowed_nets):
            return
        if ip.is_global and not ip.is_multicast:
            return
        if self.config.allow_private:
            return
        kind = (
            "unspecified"
            if ip.is_unspecified
            else "loopback"
            if ip.is_loopback
            else "link-local"
            if ip.is_link_local
            else "private"
            if ip.is_private
            else "multicast"
            if ip.is_multicast
            else "non-global"
        )
        raise UrlDenied(f"host {host!r} resolves to {kind} address {ip}, which is denied")

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
