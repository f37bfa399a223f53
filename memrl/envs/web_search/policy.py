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

The host lists hold names and addresses. A name entry matches the normalized host name; an IP
entry is an address, parsed once, and matches every spelling and embedding of it: a literal host
in any numeric form, an IPv6 form that carries it (mapped, compatible, translated, NAT64, 6to4,
Teredo), and, for ``deny_hosts``, every address that DNS gives for any host, names included.

A host is normalized once, before any check (``normalize_host``): IDNA/UTS-46 mapping (case,
fullwidth forms, characters mapped to nothing such as the soft hyphen and zero-width spaces),
then punycode; control characters, spaces and anything a host name cannot hold are refused; a
host the C resolver reads as an IPv4 number (``0x7f000001``, ``127.1``) becomes that address. The
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

from memrl.envs.web_search.addresses import (
    IPAddress,
    address_kind,
    carried_ipv4,
    ipv4_form,
    ipv4_number,
)
from memrl.envs.web_search.config import SafetyConfig

ALLOWED_SCHEMES = ("http", "https")

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

    IP literals come back in their canonical form, hosts the C resolver reads as IPv4 numbers
    (``0x7f000001``, ``2130706433``, ``127.1``) as the address they spell; names are mapped by
    IDNA/UTS-46 (lower case, fullwidth forms to ASCII, soft hyphens and zero-width characters
    removed, ideographic dots to dots), their non-ASCII labels encoded as punycode
    (``xn--...``), trailing dots dropped.

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
    """The canonical text of an IP address literal or numeric IPv4 host, or None for a name."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        number = ipv4_number(host)
        return str(number) if number is not None else None


def _literal_address(host: str) -> IPAddress | None:
    """The address of a normalized host that is an IP literal (zone dropped), or None."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def _destinations(ip: IPAddress) -> tuple[IPAddress, ...]:
    """The address itself (an IPv4-mapped one as its IPv4 address), then every IPv4 address
    an IPv6 address carries (``carried_ipv4``)."""
    if ip.version == 4:
        return (ip,)
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    return (ip, *carried_ipv4(ip))


def _carrying(ip: IPAddress, listed: IPAddress) -> str:
    """' (it carries <listed>)' where a list matched an IPv4 address inside ``ip``, else ''."""
    return "" if listed == _destinations(ip)[0] else f" (it carries {listed})"


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


@dataclass(frozen=True)
class HostList:
    """A host list of the safety config, parsed once into names and addresses."""

    names: tuple[str, ...]
    """Normalized host names; ``*.x`` stands for x's subdomains."""
    addresses: frozenset[IPAddress]
    """IP entries, an IPv4-mapped one as its IPv4 address, without zone."""

    @classmethod
    def parse(cls, patterns: tuple[str, ...], key: str) -> HostList:
        """Normalizes each entry (``normalize_host``); ``key`` names the list in errors.

        Raises:
            TypeError: an entry is not a string (YAML reads an unquoted 2130706433 as a number).
            ValueError: an entry is no host name, '*.' + a host name, or IP address.
        """
        if isinstance(patterns, str):
            raise TypeError(
                f"safety.{key} is the string {patterns!r}; give a list of hosts: [{patterns!r}]"
            )
        names, addresses = [], set()
        for pattern in patterns:
            if not isinstance(pattern, str):
                raise TypeError(
                    f"safety.{key} has {pattern!r} ({type(pattern).__name__}); entries are "
                    f"strings, so quote it: '{pattern}'"
                )
            wild = pattern.startswith("*.")
            try:
                host = normalize_host(pattern[2:] if wild else pattern)
            except UrlDenied as err:
                raise ValueError(
                    f"safety.{key} has {pattern!r}, which is not a host name, '*.' + a host "
                    f"name, or an IP address ({err})"
                ) from None
            ip = _literal_address(host)
            if ip is None:
                names.append("*." + host if wild else host)
            elif wild:
                raise ValueError(
                    f"safety.{key} has {pattern!r}, a '*.' before the IP address {host}; "
                    "'*.' takes a host name, write an address without it"
                )
            else:
                addresses.add(_destinations(ip)[0])
        return cls(tuple(names), frozenset(addresses))

    def __bool__(self) -> bool:
        return bool(self.names or self.addresses)

    def listed_destination(self, ip: IPAddress) -> IPAddress | None:
        """The first of ``ip``'s destinations that the list holds, or None (the deny test)."""
        return next((d for d in _destinations(ip) if d in self.addresses), None)

    def admits(self, ip: IPAddress) -> bool:
        """Whether the list holds ``ip`` itself or every IPv4 address it carries (the allow
        test: a form that also reaches an unlisted address is not admitted)."""
        own, *carried = _destinations(ip)
        return own in self.addresses or (bool(carried) and self.addresses.issuperset(carried))


class UrlPolicy:
    """Decides whether a URL may be fetched."""

    def __init__(self, config: SafetyConfig) -> None:
        self.config = config
        self._allow_hosts = HostList.parse(config.allow_hosts, "allow_hosts")
        self._deny_hosts = HostList.parse(config.deny_hosts, "deny_hosts")
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
        (``normalize_host``), the name to resolve and to connect as. A name is matched against
        the lists' names, an IP literal against their addresses (``HostList``)."""
        host = normalize_host(host)
        ip = _literal_address(host)
        if ip is None:
            if _matches(host, self._deny_hosts.names):
                raise UrlDenied(f"host {host!r} is on the deny list")
            allowed = _matches(host, self._allow_hosts.names)
        else:
            listed = self._deny_hosts.listed_destination(ip)
            if listed is not None:
                raise UrlDenied(f"host {host!r} is on the deny list{_carrying(ip, listed)}")
            allowed = self._allow_hosts.admits(ip)
        if self._allow_hosts and not allowed:
            raise UrlDenied(f"host {host!r} is not on the allow list")
        if self.config.allowed_ports and port not in self.config.allowed_ports:
            raise UrlDenied(
                f"port {port} is not allowed (allowed: {list(self.config.allowed_ports)})"
            )
        return host

    def check_address(self, host: str, address: str) -> None:
        """Refuses an address on the deny list (in any embedding), then non-global addresses
        unless allowed explicitly."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        listed = self._deny_hosts.listed_destination(ip)
        if listed is not None:
            raise UrlDenied(
                f"host {host!r} resolves to {ip}{_carrying(ip, listed)}, which is on the deny list"
            )
        ip = _destinations(ip)[0]  # an IPv4-mapped address is its IPv4 address
        if any(ip in net for net in self._allowed_nets) or self.config.allow_private:
            return
        if isinstance(ip, ipaddress.IPv6Address):
            form, embedded = ipv4_form(ip)
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
