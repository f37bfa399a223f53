"""Host lists hold addresses, not strings: an IP entry matches every spelling and embedding."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from websearch_helpers import FAST_FETCH, LOCAL_ONLY

from memrl.envs.web_search.addresses import ipv4_number
from memrl.envs.web_search.config import CacheConfig, SafetyConfig, SearchConfig
from memrl.envs.web_search.policy import UrlDenied, UrlPolicy
from memrl.envs.web_search.web_client import WebClient

SPELLINGS_OF_8_8_8_8 = [
    "0x08080808",
    "134744072",
    "8.8.2056",
    "8.526344",
    "010.010.010.010",
    "0x8.0x8.0x8.0x8",
    "[::ffff:8.8.8.8]",  # IPv4-mapped
    "[::8.8.8.8]",  # IPv4-compatible
    "[::ffff:0:808:808]",  # IPv4-translated
    "[64:ff9b::808:808]",  # NAT64
    "[64:ff9b:1:808:8:800::]",  # local-use NAT64, /48 layout
    "[2002:808:808::]",  # 6to4
    "[2001:0:4136:e378:8000:63bf:f7f7:f7f7]",  # Teredo, client 8.8.8.8
]


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("host", SPELLINGS_OF_8_8_8_8)
def test_an_ip_deny_entry_refuses_every_spelling_and_embedding(host, allow_private):
    policy = UrlPolicy(SafetyConfig(deny_hosts=("8.8.8.8",), allow_private=allow_private))
    with pytest.raises(UrlDenied, match="on the deny list"):
        policy.check_url(f"http://{host}/")
    with pytest.raises(UrlDenied, match="on the deny list"):
        policy.resolve(host.strip("[]"), 443)


@pytest.mark.parametrize("entry", ["0x08080808", "134744072", "::ffff:8.8.8.8", "8.8.8.8."])
def test_ip_deny_entries_are_read_in_any_spelling(entry):
    policy = UrlPolicy(SafetyConfig(deny_hosts=(entry,)))
    with pytest.raises(UrlDenied, match="'8.8.8.8' is on the deny list"):
        policy.check_host("8.8.8.8", 443)


def test_every_resolved_address_is_held_against_the_deny_list():
    """A name is refused for what DNS answers, in any embedding, whatever allows the address."""
    policy = UrlPolicy(SafetyConfig(deny_hosts=("127.0.0.1",), allow_private=True))
    with pytest.raises(UrlDenied, match="resolves to 127.0.0.1, which is on the deny list"):
        policy.resolve("localhost", 80)
    denied = UrlPolicy(SafetyConfig(deny_hosts=("8.8.8.8",), allow_addresses=("::/0",)))
    with pytest.raises(UrlDenied, match=r"64:ff9b::808:808 \(it carries 8.8.8.8\), which is on"):
        denied.check_address("dns.example", "64:ff9b::808:808")


@pytest.mark.parametrize("host", ["8.8.4.4", "[64:ff9b::808:404]", "[2002:808:404::]"])
def test_other_addresses_pass_an_ip_deny_entry(host):
    policy = UrlPolicy(SafetyConfig(deny_hosts=("8.8.8.8",)))
    name, port = policy.check_url(f"http://{host}/")
    assert policy.resolve(name, port).address == name


def test_an_ip_allow_entry_admits_its_spellings_and_forms_that_carry_only_it():
    policy = UrlPolicy(SafetyConfig(allow_hosts=("127.0.0.1",)))
    for host in ("0x7f000001", "2130706433", "127.1", "::ffff:127.0.0.1", "64:ff9b::7f00:1"):
        policy.check_host(host, 80)
    # A name is refused before any DNS lookup; a Teredo address also reaches its server.
    for host in ("localhost", "127.0.0.2", "2001:0:7f00:1::f7f7:f7f7"):
        with pytest.raises(UrlDenied, match="not on the allow list"):
            policy.check_host(host, 80)


@pytest.mark.parametrize(
    "entries, error, message",
    [
        (("*.8.8.8.8",), ValueError, r"'\*\.' before the IP address 8.8.8.8"),
        (("10.0.0.0/8",), ValueError, "not a host name, '\\*.' \\+ a host name, or an IP address"),
        ((134744072,), TypeError, "134744072 \\(int\\).*quote it: '134744072'"),
        ("8.8.8.8", TypeError, r"the string '8.8.8.8'; give a list of hosts: \['8.8.8.8'\]"),
    ],
)
def test_host_list_entries_that_cannot_be_read_are_config_errors(entries, error, message):
    for key in ("deny_hosts", "allow_hosts"):
        with pytest.raises(error, match=f"safety.{key} .*{message}"):
            UrlPolicy(SafetyConfig(**{key: entries}))


@pytest.mark.parametrize(
    "spelling, address",
    [
        ("0x7f000001", "127.0.0.1"),
        ("0X7F.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.01", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("1.16777215", "1.255.255.255"),
        ("0xffffffff", "255.255.255.255"),
        ("0", "0.0.0.0"),
        ("000000000000000000000001", "0.0.0.1"),
    ],
)
def test_numeric_ipv4_hosts_are_read_as_the_resolver_reads_them(spelling, address):
    assert ipv4_number(spelling) == ipaddress.IPv4Address(address)
    assert socket.getaddrinfo(spelling, 80, type=socket.SOCK_STREAM)[0][4][0] == address


@pytest.mark.parametrize(
    "host",
    ["0x", "08.0.0.1", "1..2", "1.2.3.4.5", "4294967296", "0x1ffffffff", "1.2.3.256", "256.1"]
    + ["1.16777216", "1.2.3.4x", "1_0.0.0.1", "\uff11.2.3.4", "9" * 5000, "example.com"],
)
def test_other_hosts_are_no_ipv4_number(host):
    assert ipv4_number(host) is None


def _searx(site, host: str, safety: SafetyConfig) -> WebClient:
    """A client whose JSON search backend lives at ``host`` (the local site's port)."""
    port = site.url.rsplit(":", 1)[1]
    search = SearchConfig(
        backend="searxng_json", options={"url": f"http://{host}:{port}/searx/search"}
    )
    return WebClient(safety=safety, fetch=FAST_FETCH, cache=CacheConfig(mode="off"), search=search)


@pytest.mark.parametrize(
    "host", ["0x7f000001", "2130706433", "127.1", "0177.0.0.1", "[::ffff:127.0.0.1]"]
)
def test_json_search_client_never_fetches_a_denied_address_in_another_spelling(site, host):
    denied = SafetyConfig(deny_hosts=("127.0.0.1",), allow_private=True)
    before = site.hits["/searx/search"]
    client = _searx(site, host, denied)
    try:
        outcome = client.search("vornland dish")
    finally:
        client.close()
    assert not outcome.results and "on the deny list" in outcome.error, outcome
    assert site.hits["/searx/search"] == before


@pytest.mark.parametrize("host", ["0x7f000001", "2130706433", "127.1", "0177.0.0.1"])
def test_json_search_client_reaches_an_allowed_address_in_another_spelling(site, host):
    client = _searx(site, host, LOCAL_ONLY)
    try:
        outcome = client.search("vornland dish")
    finally:
        client.close()
    assert not outcome.error and outcome.results[0].title == "Vornish cuisine", outcome
