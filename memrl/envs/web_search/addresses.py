"""Which IP addresses a fetch may reach: memrl's own copy of the IANA special-purpose registries.

Python's ``ipaddress`` decides ``is_global`` from tables that changed between patch releases of
one Python version (3.11.7 counts 192.0.0.0/24, which holds a cloud provider's metadata
address, as global), so the URL policy does not use it. ``address_kind`` reads the tables below
instead: the IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and its updates, as
of 2025) plus the multicast ranges. An address is global when no range holds it and, for IPv6,
when it lies in 2000::/3, the only block IANA allocates for global unicast.

Ranges the registries mark globally reachable inside a larger non-global block (anycast service
addresses in 192.0.0.0/24 and 2001::/23) are denied with their block: no agent needs them. IPv6
forms that carry an IPv4 address (mapped, NAT64, 6to4, ...) are the URL policy's business
(``policy._ipv4_form``), which judges the IPv4 address inside with this same table.
"""

from __future__ import annotations

import ipaddress

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
