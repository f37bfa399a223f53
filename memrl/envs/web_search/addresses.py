"""Which IP addresses a fetch may reach: memrl's own copy of the IANA special-purpose registries.

Python's ``ipaddress`` decides ``is_global`` from tables that changed between patch releases of
one Python version (3.11.7 counts 192.0.0.0/24, which holds a cloud provider's metadata
address, as global), so the URL policy does not use it. ``address_kind`` reads the tables below
instead: the IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and its updates, as
of 2025) plus the multicast ranges. An address is global when no range holds it and, for IPv6,
when it lies in 2000::/3, the only block IANA allocates for global unicast.

Ranges the registries mark globally reachable inside a larger non-global block (anycast service
addresses in 192.0.0.0/24 and 2001::/23) are denied with their block: no agent needs them.

Two more facts about addresses live here, for the URL policy to judge with: which IPv6 forms
carry an IPv4 address and which one (``ipv4_form``, ``carried_ipv4``), and which host names the C
resolver reads as IPv4 numbers (``ipv4_number``: ``0x7f000001``, ``2130706433``, ``127.1``).
"""

from __future__ import annotations

import ipaddress
import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_IPV4_SPECIAL: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/32", "unspecified"),
    ("0.0.0.0/8", "this-network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignment"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)
"""(network, kind), most specific first: the first range that holds an address names it."""

_IPV6_SPECIAL: tuple[tuple[str, str], ...] = (
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy"),
    ("2001::/23", "IETF protocol assignment"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment-routing"),
    ("fc00::/7", "unique-local (private)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
)
"""(network, kind), most specific first. The IPv4-carrying ranges (::ffff:0:0/96, 64:ff9b::/96,
64:ff9b:1::/48, 2002::/16, ...) are judged by the policy from the IPv4 address they carry."""

_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")
_LOCAL_NAT64_STARTS = (6, 7, 8, 11)
"""Where the IPv4 address starts in a local-use NAT64 address's bytes less byte 8 (RFC 6052
keeps bits 64-71 zero), for each prefix length its operator may pick: /48, /56, /64, /96."""
_IPV4_PART = re.compile(r"0x[0-9a-f]+|0[0-7]*|[1-9][0-9]*", re.IGNORECASE)
"""One part of a numeric IPv4 host as ``inet_aton`` reads it: hex, octal (leading 0), decimal."""

_TABLES = {
    4: [(ipaddress.ip_network(net), kind) for net, kind in _IPV4_SPECIAL],
    6: [(ipaddress.ip_network(net), kind) for net, kind in _IPV6_SPECIAL],
}


def address_kind(ip: IPAddress) -> str:
    """Why ``ip`` is not globally reachable (e.g. "loopback", "IETF protocol assignment"), or ""
    for a global unicast address."""
    for net, kind in _TABLES[ip.version]:
        if ip in net:
            return kind
    if ip.version == 6 and ip not in _GLOBAL_UNICAST_V6:
        return "reserved"
    return ""


def ipv4_form(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address | None]:
    """The IPv4-carrying form of an IPv6 address and the one IPv4 address the policy judges it
    by, or ("", None). IPv4-mapped addresses are not a form here: they are the IPv4 address."""
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


def carried_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """Every IPv4 address that a connection to ``ip`` may reach through a translator or tunnel:
    the mapped address, the one of its ``ipv4_form``, a Teredo address's server and client, and
    a local-use NAT64 address's candidate at each prefix length (its operator picks one)."""
    if ip.ipv4_mapped is not None:
        return (ip.ipv4_mapped,)
    form, embedded = ipv4_form(ip)
    if embedded is not None:
        return (embedded,)
    if form == "local-use NAT64":
        packed = ip.packed[:8] + ip.packed[9:]
        return tuple(
            ipaddress.IPv4Address(packed[start : start + 4]) for start in _LOCAL_NAT64_STARTS
        )
    if ip.teredo is not None:
        return ip.teredo
    return ()


def ipv4_number(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a host spells in the numeric forms the C resolver accepts, or None.

    ``inet_aton`` reads one to four dot-separated parts, each decimal, octal (leading 0) or hex
    (``0x``); every part but the last is one byte and the last fills the bytes left, so
    ``0x7f000001``, ``2130706433``, ``127.1`` and ``0177.0.0.1`` all spell 127.0.0.1.
    """
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(p) for p in parts):
        return None
    values = []
    for part in parts:
        if part[:2].lower() == "0x":
            digits, base = part[2:], 16
        else:
            digits, base = part, 8 if part.startswith("0") else 10
        digits = digits.lstrip("0") or "0"
        if len(digits) > 11:  # past 2**32 in any of the bases; keeps int() off huge strings
            return None
        values.append(int(digits, base))
    *head, last = values
    last_bits = 8 * (4 - len(head))
    if any(v > 0xFF for v in head) or last >= 1 << last_bits:
        return None
    number = 0
    for value in head:
        number = number << 8 | value
    return ipaddress.IPv4Address(number << last_bits | last)
