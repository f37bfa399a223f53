"""URL safety (schemes, host lists, address classes after DNS) and per-host politeness.

``UrlPolicy.resolve`` is the one gate: the filtering proxy (``proxy.py``) calls it for every
request the browser or the HTTP client makes, redirects included, and connects to the address it
vetted, so a second DNS answer cannot slip a private address in between check and connect.

IPv6 forms that carry an IPv4 address are judged by it, since a translator or a dual-stack
socket may deliver them there: IPv4-mapped addresses (``::ffff:a.b.c.d``) count as the IPv4
address itself; NAT64 (``64:ff9b::/96``) and 6to4 (``2002::/16``) addresses pass only when the
IPv4 address they embed is global; the deprecated IPv4-compatible (``::a.b.c.d``) and
IPv4-translated (``::ffff:0:a.b.c.d``) forms, local-use NAT64 (``64:ff9b:1::/48``) and
site-local addresses (``fec0::/10``) are never global. Which addresses are global comes from
memrl's own copy of the IANA special-purpose registries (``addresses.py``), not from Python's
``ipaddress``, whose idea of "global" changed between patch releases.

A host is normalized once, before any check (``normalize_host``): IDNA/UTS-46 mapping (case,
fullwidth forms, characters mapped to nothing such as the soft hyphen and zero-width spaces),
then punycode; control characters, spaces and anything a host name cannot hold are refused. The
host lists are matched against that string and DNS resolves that same string, so no spelling
reaches one name for the lists and another for the resolver.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import re
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, urljoin, urlsplit

import idna

from memrl.envs.web_search.addresses import address_kind
from memrl.envs.web_search.config import SafetyConfig

ALLOWED_SCHEMES = ("http", "https")

_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
"""A host-name label after normalization (underscores occur in real DNS names)."""
MAX_HOST_CHARS = 253
_TARGET_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))
"""Characters a request target keeps as they are: printable ASCII (existing escapes included)."""
_NOT_ESCAPED_BYTE = re.compile("[\ud800-\udc7f\udd00-\udfff]")
"""Lone surrogates other than those ``surrogateescape`` makes of undecodable bytes."""


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


def request_target(parts: SplitResult) -> str:
    """A URL's path and query as sent on the request line: every character outside printable
    ASCII percent-encoded as UTF-8 (surrogates from ``surrogateescape`` decoding as the bytes
    they stand for, other lone surrogates as U+FFFD), so no path a page or a redirect names can
    break the request."""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    target = _NOT_ESCAPED_BYTE.sub("\ufffd", target)
    return quote(target, safe=_TARGET_SAFE, errors="surrogateescape")


def host_of(url: str) -> str:
    """The lower-cased host of a URL, or "" when it has none or cannot be parsed."""
    parts = split_url(url)
    return (parts.hostname or "") if parts is not None else ""


def normalize_host(host: str) -> str:
    """The one spelling of a host that the host lists see and DNS resolves.

    IP literals come back in their canonical form; names are mapped by IDNA/UTS-46 (lower case,
    fullwidth forms to ASCII, soft hyphens and zero-width characters removed, ideographic dots
    to dots), their non-ASCII labels encoded as punycode (``xn--...``), trailing dots dropped.

    Raises:
        UrlDenied: the host is empty, holds a control character or space, or is not a valid
            host name after mapping.
    """
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in host):
        raise UrlDenied(f"host {host[:100]!r} contains a control character or a space")
    literal = _ip_literal(host)
    if literal is not None:
        return literal
    try:
        mapped = idna.uts46_remap(host, std3_rules=False, transitional=False)
    except (idna.IDNAError, UnicodeError) as err:
        raise UrlDenied(f"host {host[:100]!r} is not a valid host name ({err})") from None
    labels = mapped.rstrip(".").split(".")
    try:
        labels = [x if x.isascii() else "xn--" + x.encode("punycode").decode() for x in labels]
    except UnicodeError as err:
        raise UrlDenied(f"host {host[:100]!r} is not a valid host name ({err})") from None
    name = ".".join(labels)
    if not name:
        raise UrlDenied(f"host {host[:100]!r} is empty")
    literal = _ip_literal(name)  # e.g. fullwidth digits
    if literal is not None:
        return literal
    if len(name) > MAX_HOST_CHARS or not all(_LABEL.fullmatch(x) for x in labels):
        raise UrlDenied(
            f"host {host[:100]!r} is not a valid host name (labels of letters, digits, '-' "
            f"and '_', at most 63 characters each and {MAX_HOST_CHARS} in all)"
        )
    return name


def _ip_literal(host: str) -> str | None:
    """The canonical text of an IP address literal, or None for a name."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


@dataclass(frozen=True)
class Vetted:
    """A host that passed the policy, with the address to connect to."""

    host: str
    port: int
    address: str


def _matches(host: str, patterns: tuple[str, ...]) -> bool:
    """Whether a normalized host matches a normalized pattern (``*.x`` for x's subdomains)."""
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False


def _normalized_patterns(patterns: tuple[str, ...], key: str) -> tuple[str, ...]:
    out = []
    for pattern in patterns:
        wild = pattern.startswith("*.")
        try:
            host = normalize_host(pattern[2:] if wild else pattern)
        except UrlDenied as err:
            raise ValueError(
                f"safety.{key} has {pattern!r}, which is not a host name or '*.' + a host name "
                f"({err})"
            ) from None
        out.append("*." + host if wild else host)
    return tuple(out)


class UrlPolicy:
    """Decides whether a URL may be fetched."""

    def __init__(self, config: SafetyConfig) -> None:
        self.config = config
        self._allow_hosts = _normalized_patterns(config.allow_hosts, "allow_hosts")
        self._deny_hosts = _normalized_patterns(config.deny_hosts, "deny_hosts")
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
        """Checks scheme and host lists (no DNS); returns (normalized host, port).

        Raises:
            UrlDenied: the URL is malformed, the scheme is not http(s), there is no host or an
                invalid one, or a host list refuses it.
        """
        parts = split_url(url)
        if parts is None:  # brackets that hold no IPv6 address, unbalanced brackets
            raise UrlDenied(f"URL {url[:100]!r} is malformed (its host cannot be parsed)")
        hostname = parts.hostname
        scheme = parts.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise UrlDenied(f"scheme {scheme or '(none)'!r} is not allowed (only http and https)")
        if not (hostname or "").rstrip("."):
            raise UrlDenied(f"URL {url[:100]!r} has no host")
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError as err:
            raise UrlDenied(f"URL {url[:100]!r} has an invalid port") from err
        return self.check_host(hostname, port), port

    def check_host(self, host: str, port: int) -> str:
        """Host lists and ports, before any DNS lookup; returns the normalized host
        (``normalize_host``), the name to resolve and to connect as."""
        host = normalize_host(host)
        if _matches(host, self._deny_hosts):
            raise UrlDenied(f"host {host!r} is on the deny list")
        if self._allow_hosts and not _matches(host, self._allow_hosts):
            raise UrlDenied(f"host {host!r} is not on the allow list")
        if self.config.allowed_ports and port not in self.config.allowed_ports:
            raise UrlDenied(
                f"port {port} is not allowed (allowed: {list(self.config.allowed_ports)})"
            )
        return host

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
                kind = address_kind(embedded) if embedded is not None else ""
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
        kind = address_kind(ip)
        if kind:
            raise UrlDenied(f"host {host!r} resolves to {kind} address {ip}, which is denied")

    def fingerprint(self) -> str:
        """A short digest of the safety config: what was fetched under one policy is cached
        under its fingerprint, so a stricter policy never reads a laxer one's pages."""
        fields = dataclasses.asdict(self.config)
        payload = json.dumps(fields, sort_keys=True, default=list)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def resolve(self, host: str, port: int) -> Vetted:
        """Host checks, DNS, and the address check of every answer; returns one vetted address
        (``Vetted.host`` is the normalized host, the name that was checked and resolved).

        Raises:
            UrlDenied: an invalid host, refused by a list, unresolvable, or any resolved address
                is refused.
        """
        host = self.check_host(host, port)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError, ValueError) as err:
            raise UrlDenied(f"host {host!r} does not resolve ({err})") from err
        addresses = list(dict.fromkeys(info[4][0] for info in infos))
        for address in addresses:
            self.check_address(host, address)
        return Vetted(host=host, port=port, address=addresses[0])


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
