"""URL policy, filtering proxy, pinned HTTP client and politeness (no browser)."""

from __future__ import annotations

import http.client
import socket

import pytest
from websearch_helpers import FAST_FETCH, LOCAL_ONLY, WITH_DENIED_TARGETS

from memrl.envs.web_search.api_client import HttpClient, HttpError
from memrl.envs.web_search.cache import WebCache
from memrl.envs.web_search.config import CacheConfig, SafetyConfig, SearchConfig
from memrl.envs.web_search.policy import HostRateLimiter, UrlDenied, UrlPolicy, normalize_host
from memrl.envs.web_search.proxy import BLOCKED_HEADER, SafetyProxy
from memrl.envs.web_search.web_client import WebClient


@pytest.mark.parametrize(
    "url, reason",
    [
        ("file:///etc/passwd", "scheme 'file'"),
        ("ftp://127.0.0.1/x", "scheme 'ftp'"),
        ("javascript:alert(1)", "scheme 'javascript'"),
        ("http:///nohost", "no host"),
        ("http://evil.example/x", "not on the allow list"),
        ("http://[::1/x", "malformed"),
        ("http://[x]/", "malformed"),
        ("http://a]b/", "malformed"),
    ],
)
def test_check_url_refuses_bad_schemes_and_hosts(url, reason):
    with pytest.raises(UrlDenied, match=reason):
        UrlPolicy(LOCAL_ONLY).check_url(url)


def test_deny_list_wins_and_wildcards_match_subdomains():
    policy = UrlPolicy(
        SafetyConfig(allow_hosts=("*.example.org",), deny_hosts=("bad.example.org",))
    )
    policy.check_host("a.b.example.org", 443)
    with pytest.raises(UrlDenied, match="deny list"):
        policy.check_host("bad.example.org", 443)
    with pytest.raises(UrlDenied, match="allow list"):
        policy.check_host("example.com", 443)


@pytest.mark.parametrize(
    "address, kind",
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("169.254.169.254", "link-local"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("::ffff:10.0.0.1", "private"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "shared"),
    ],
)
def test_non_global_addresses_denied_by_default(address, kind):
    with pytest.raises(UrlDenied, match=kind):
        UrlPolicy(SafetyConfig()).check_address("h", address)


def test_global_address_allowed_and_explicit_exceptions():
    UrlPolicy(SafetyConfig()).check_address("h", "93.184.216.34")
    UrlPolicy(SafetyConfig(allow_addresses=("127.0.0.1",))).check_address("h", "127.0.0.1")
    UrlPolicy(SafetyConfig(allow_addresses=("10.0.0.0/8",))).check_address("h", "10.9.9.9")
    with pytest.raises(UrlDenied):
        UrlPolicy(SafetyConfig(allow_addresses=("127.0.0.1",))).check_address("h", "127.0.0.2")
    UrlPolicy(SafetyConfig(allow_private=True)).check_address("h", "192.168.1.1")


def test_check_happens_after_dns_resolution():
    # "localhost" is a name, not on any list: it is refused for what it resolves to.
    with pytest.raises(UrlDenied, match="resolves to loopback"):
        UrlPolicy(SafetyConfig()).resolve("localhost", 80)
    vetted = UrlPolicy(SafetyConfig(allow_addresses=("127.0.0.1", "::1"))).resolve("localhost", 80)
    assert vetted.address in ("127.0.0.1", "::1")


def test_bad_allow_address_is_a_clear_value_error():
    with pytest.raises(ValueError, match="not an IP address"):
        UrlPolicy(SafetyConfig(allow_addresses=("localhost",)))


def test_ports_can_be_restricted():
    with pytest.raises(UrlDenied, match="port 8080"):
        UrlPolicy(SafetyConfig(allowed_ports=(80, 443))).check_url("http://a.example:8080/")


def test_rate_limiter_spaces_requests_per_host():
    limiter = HostRateLimiter(0.3)
    assert limiter.wait("a") == 0.0
    assert limiter.wait("b") == 0.0  # another host is not delayed
    assert limiter.wait("a") > 0.1


def _via_proxy(proxy: SafetyProxy, method: str, target: str) -> http.client.HTTPResponse:
    host, port = proxy.address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(method, target)
    return conn.getresponse()


def test_proxy_forwards_allowed_and_refuses_private(site):
    proxy = SafetyProxy(UrlPolicy(WITH_DENIED_TARGETS), max_bytes=1_000_000)
    try:
        ok = _via_proxy(proxy, "GET", site.url + "/page/zorbania")
        assert ok.status == 200 and b"Quillton" in ok.read()
        refused = _via_proxy(proxy, "GET", "http://10.255.255.1/secret")
        assert refused.status == 403
        assert "private address" in refused.getheader(BLOCKED_HEADER)
        tunnel = _via_proxy(proxy, "CONNECT", "169.254.169.254:443")
        assert tunnel.status == 403
        events = proxy.events_since(0)
        assert [e.blocked is None for e in events] == [True, False, False]
        assert "link-local" in events[-1].blocked
    finally:
        proxy.close()


def test_proxy_cuts_bodies_at_the_cap(site):
    proxy = SafetyProxy(UrlPolicy(LOCAL_ONLY), max_bytes=100_000)
    try:
        resp = _via_proxy(proxy, "GET", site.url + "/huge")
        body = resp.read()
        assert len(body) == 100_000
        assert proxy.events_since(0)[-1].truncated
    finally:
        proxy.close()


def test_proxy_https_tunnel_is_vetted_then_relayed(site):
    # A CONNECT to the allowed site opens a raw tunnel (plain HTTP inside, which is fine).
    proxy = SafetyProxy(UrlPolicy(LOCAL_ONLY), max_bytes=1_000_000, timeout_s=5)
    try:
        host, port = proxy.address.split(":")
        target = site.url.removeprefix("http://")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            assert b"200" in sock.recv(4096).split(b"\r\n")[0]
            sock.sendall(f"GET /notes.txt HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            data = b""
            while b"Oren Vale" not in data:
                chunk = sock.recv(4096)
                assert chunk, data
                data += chunk
    finally:
        proxy.close()


def test_http_client_checks_every_redirect(site):
    client = HttpClient(UrlPolicy(WITH_DENIED_TARGETS), timeout_s=5, max_bytes=1_000_000)
    assert client.request("GET", site.url + "/redirect-ok").status == 200
    with pytest.raises(UrlDenied, match="private address 10.255.255.1"):
        client.request("GET", site.url + "/redirect-private")
    with pytest.raises(UrlDenied, match="link-local"):
        client.request("GET", site.url + "/redirect-linklocal")
    with pytest.raises(HttpError, match="exceeds"):
        HttpClient(UrlPolicy(LOCAL_ONLY), 5, max_bytes=1000).request("GET", site.url + "/huge")


@pytest.mark.parametrize(
    "host, form",
    [
        ("::127.0.0.1", "IPv4-compatible address ::7f00:1 .*loopback IPv4 address 127.0.0.1"),
        ("64:ff9b::7f00:1", "NAT64 address .*loopback IPv4 address 127.0.0.1"),
        ("2002:7f00:1::", "6to4 address .*loopback IPv4 address 127.0.0.1"),
        ("::ffff:0:7f00:1", "IPv4-translated address .*loopback IPv4 address 127.0.0.1"),
        ("64:ff9b::a9fe:a9fe", "NAT64 address .*link-local IPv4 address 169.254.169.254"),
        ("::ffff:0:808:808", "IPv4-translated address .*IPv4 address 8.8.8.8"),
        ("64:ff9b:1::a00:1", "local-use NAT64 address"),
        ("fec0::1", "site-local address fec0::1"),
    ],
)
def test_ipv6_forms_carrying_ipv4_are_denied_by_default(host, form):
    # The whole path of a URL: parse, host checks, DNS (of a literal), address check.
    for policy in (
        UrlPolicy(SafetyConfig()),
        UrlPolicy(SafetyConfig(allow_addresses=("127.0.0.1",))),
    ):
        name, port = policy.check_url(f"http://[{host}]:8080/x")
        with pytest.raises(UrlDenied, match=form):
            policy.resolve(name, port)


def test_nat64_and_6to4_of_global_addresses_pass():
    policy = UrlPolicy(SafetyConfig())
    assert policy.resolve("64:ff9b::808:808", 443).address == "64:ff9b::808:808"
    assert policy.resolve("2002:808:808::1", 443).address == "2002:808:808::1"
    UrlPolicy(SafetyConfig(allow_addresses=("64:ff9b::/96",))).check_address("h", "64:ff9b::a00:1")
    UrlPolicy(SafetyConfig(allow_private=True)).check_address("h", "::7f00:1")


def test_proxy_refuses_an_ipv6_form_of_loopback(site):
    proxy = SafetyProxy(UrlPolicy(SafetyConfig(allow_addresses=("127.0.0.1",))), max_bytes=1000)
    try:
        port = site.url.rsplit(":", 1)[1]
        refused = _via_proxy(proxy, "GET", f"http://[::127.0.0.1]:{port}/page/zorbania")
        assert refused.status == 403 and "IPv4-compatible" in refused.getheader(BLOCKED_HEADER)
    finally:
        proxy.close()


def test_cache_entries_are_kept_apart_by_policy(site, tmp_path):
    """Search results fetched under a lax policy are not served under a stricter one."""
    search = SearchConfig(backend="searxng_json", options={"url": site.url + "/searx/search"})
    cache = CacheConfig(mode="readwrite", path=str(tmp_path))
    lax = WebClient(safety=LOCAL_ONLY, fetch=FAST_FETCH, cache=cache, search=search)
    try:
        first = lax.search("vornland dish")
        assert not first.error and first.results[0].title == "Vornish cuisine"
        assert lax.search("vornland dish").cached
    finally:
        lax.close()
    for mode in ("readwrite", "replay"):
        strict = WebClient(
            fetch=FAST_FETCH, cache=CacheConfig(mode=mode, path=str(tmp_path)), search=search
        )
        try:
            outcome = strict.search("vornland dish")
            assert not outcome.cached and not outcome.results, outcome
            expected = "loopback" if mode == "readwrite" else "not in the replay cache"
            assert expected in outcome.error
        finally:
            strict.close()


def _raw_via_proxy(proxy: SafetyProxy, data: bytes) -> bytes:
    """Sends raw bytes to the proxy; returns what it answers before closing (b"" if nothing)."""
    host, port = proxy.address.split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(data)
        try:
            return sock.recv(4096)
        except ConnectionResetError:
            return b""


@pytest.mark.parametrize(
    "length, status",
    [("-1", b" 400 "), ("12x", b" 400 "), ("1000000000000", b" 413 ")],
)
def test_proxy_refuses_bad_request_lengths(site, length, status):
    proxy = SafetyProxy(UrlPolicy(LOCAL_ONLY), max_bytes=1000, timeout_s=5)
    try:
        head = f"POST {site.url}/api/search HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n"
        assert status in _raw_via_proxy(proxy, head.encode()).split(b"\r\n")[0]
    finally:
        proxy.close()


def test_proxy_drops_a_client_that_stops_mid_body(site):
    proxy = SafetyProxy(UrlPolicy(LOCAL_ONLY), max_bytes=1000, timeout_s=1)
    try:
        head = f"POST {site.url}/api/search HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        assert _raw_via_proxy(proxy, head.encode() + b"only ten b") == b""
        assert _via_proxy(proxy, "GET", site.url + "/page/zorbania").status == 200
    finally:
        proxy.close()


def test_http_client_reports_a_redirect_to_a_malformed_url(site):
    client = HttpClient(UrlPolicy(LOCAL_ONLY), timeout_s=5, max_bytes=1_000_000)
    with pytest.raises(HttpError, match="redirects to a malformed URL"):
        client.request("GET", site.url + "/redirect-malformed")


@pytest.mark.parametrize(
    "address, kind",
    [
        ("192.0.0.192", "IETF protocol assignment"),  # a cloud's metadata address
        ("192.0.0.9", "IETF protocol assignment"),  # anycast inside the block: denied with it
        ("192.0.2.10", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("192.88.99.1", "6to4 relay"),
        ("0.1.2.3", "this-network"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("224.0.0.251", "multicast"),
        ("::ffff:192.0.0.192", "IETF protocol assignment address 192.0.0.192"),
        ("64:ff9b::c000:c0", "NAT64 .* IETF protocol assignment IPv4 address 192.0.0.192"),
        ("2002:c000:c0::1", "6to4 .* IETF protocol assignment IPv4 address 192.0.0.192"),
        ("2001::1", "IETF protocol assignment"),  # Teredo
        ("2001:db8::1", "documentation"),
        ("3fff::1", "documentation"),
        ("100::1", "discard-only"),
        ("5f00::1", "segment-routing"),
        ("fc00::1", "unique-local"),
        ("ff02::1", "multicast"),
        ("4000::1", "reserved"),  # outside 2000::/3, the global unicast block
    ],
)
def test_special_purpose_addresses_are_denied_by_the_policys_own_table(address, kind):
    """The IANA special-purpose registries, whatever this Python's ``ipaddress`` thinks is
    global (3.11.7 lets 192.0.0.0/24 through), on the whole path of a URL with a literal."""
    policy = UrlPolicy(SafetyConfig())
    host = f"[{address}]" if ":" in address else address
    name, port = policy.check_url(f"http://{host}/latest/meta-data/")
    with pytest.raises(UrlDenied, match=kind):
        policy.resolve(name, port)


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "192.31.196.1", "2606:4700:4700::1111", "64:ff9b::808:808"],
)
def test_global_addresses_pass_the_table(address):
    UrlPolicy(SafetyConfig()).check_address("h", address)


DENIED = SafetyConfig(
    allow_hosts=("*.allowed.example", "denied.example"), deny_hosts=("denied.example",)
)
"""The deny list names denied.example; only the allow list would let it through."""


@pytest.mark.parametrize(
    "spelling",
    [
        "DENIED.example",
        "denied.example.",
        "den\u00adied.example",  # soft hyphen
        "deni\u200bed.example",  # zero-width space
        "de\u2060nied.example",  # word joiner
        "\ufeffdenied.example",  # zero-width no-break space
        "\uff44\uff45\uff4e\uff49\uff45\uff44.example",  # fullwidth letters
        "denied\u3002example",  # ideographic full stop
    ],
)
def test_host_lists_see_the_name_that_dns_resolves(spelling):
    """Every spelling that IDNA maps to denied.example is denied.example for the lists, in a URL
    and as a bare host (the proxy's CONNECT path), before any DNS lookup."""
    policy = UrlPolicy(DENIED)
    with pytest.raises(UrlDenied, match="'denied.example' is on the deny list"):
        policy.check_url(f"http://{spelling}/x")
    with pytest.raises(UrlDenied, match="'denied.example' is on the deny list"):
        policy.resolve(spelling, 443)


@pytest.mark.parametrize(
    "host", ["denied.example\x00.allowed.example", "a\tb.allowed.example", "a b.allowed.example"]
)
def test_hosts_with_control_characters_or_spaces_are_refused(host):
    # A resolver stops at the NUL: the lists would see *.allowed.example, DNS denied.example.
    with pytest.raises(UrlDenied, match="control character or a space"):
        UrlPolicy(DENIED).resolve(host, 443)


def test_normalized_hosts_and_patterns():
    assert normalize_host("B\u00fccher.Example.") == "xn--bcher-kva.example"
    assert normalize_host("\uff11\uff12\uff17.0.0.1") == "127.0.0.1"  # fullwidth digits
    assert normalize_host("0:0::1") == "::1"
    assert normalize_host("under_score.example") == "under_score.example"
    for bad in ("", "a..b", "-" * 64 + ".example", "a\ud800b.example", "x%41.example"):
        with pytest.raises(UrlDenied):
            normalize_host(bad)
    policy = UrlPolicy(SafetyConfig(allow_hosts=("B\u00fccher.example",)))
    assert policy.check_url("http://xn--bcher-kva.example/")[0] == "xn--bcher-kva.example"
    assert policy.check_url("http://B\u00dcCHER.example/")[0] == "xn--bcher-kva.example"
    with pytest.raises(ValueError, match="safety.deny_hosts has 'a b.example'"):
        UrlPolicy(SafetyConfig(deny_hosts=("a b.example",)))


def test_http_client_redirects_to_odd_locations_end_in_its_own_errors(site):
    """A redirect to a path with a raw Latin-1 byte is followed (percent-encoded, the byte kept);
    one to a host with a NUL is refused by the policy: no UnicodeEncodeError or InvalidURL."""
    client = HttpClient(UrlPolicy(LOCAL_ONLY), timeout_s=5, max_bytes=1_000_000)
    assert client.request("GET", site.url + "/redirect-latin1").status == 404
    assert site.hits["/caf%E9%20au%20lait"] >= 1
    with pytest.raises(UrlDenied, match="control character"):
        client.request("GET", site.url + "/redirect-nul-host")


def _raw_answer(proxy: SafetyProxy, request: bytes) -> tuple[bytes, bytes]:
    """Status line and body of the proxy's answer to raw request bytes."""
    host, port = proxy.address.split(":")
    data = b""
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(request)
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


@pytest.mark.parametrize(
    "request_line, reason",
    [
        (b"GET http://den\xc2\xadied.example/ HTTP/1.1", b"deny list"),
        (b"GET http://DEN\xef\xbc\xa9ED.example/ HTTP/1.1", b"deny list"),  # fullwidth I
        (b"CONNECT den\xc2\xadied.example:443 HTTP/1.1", b"deny list"),
        (b"CONNECT de\xe2\x80\x8bnied.example:443 HTTP/1.1", b"deny list"),
        (b"CONNECT denied.example\x00.allowed.example:443 HTTP/1.1", b"control character"),
        (b"GET http://denied.example%00.allowed.example/ HTTP/1.1", b"not a valid host"),
    ],
)
def test_raw_proxy_requests_are_judged_on_the_normalized_host(request_line, reason):
    proxy = SafetyProxy(UrlPolicy(DENIED), max_bytes=1000, timeout_s=5)
    try:
        status, body = _raw_answer(proxy, request_line + b"\r\nHost: x\r\n\r\n")
        assert b" 403 " in status and reason in body, (status, body)
    finally:
        proxy.close()


def test_proxy_forwards_a_raw_latin1_path_percent_encoded(site):
    proxy = SafetyProxy(UrlPolicy(LOCAL_ONLY), max_bytes=100_000, timeout_s=5)
    try:
        request = f"GET {site.url}/d\xe9j\xe0 HTTP/1.1\r\nHost: x\r\n\r\n".encode("latin-1")
        status, _ = _raw_answer(proxy, request)
        assert b" 404 " in status and site.hits["/d%E9j%E0"] == 1
    finally:
        proxy.close()


def test_proxy_sends_the_vetted_host_upstream_not_the_clients_host_header(site):
    proxy = SafetyProxy(UrlPolicy(LOCAL_ONLY), max_bytes=1000, timeout_s=5)
    try:
        request = f"GET {site.url}/echo-host HTTP/1.1\r\nHost: denied.example\r\n\r\n"
        status, body = _raw_answer(proxy, request.encode())
        assert b" 200 " in status and body.decode() == site.url.removeprefix("http://")
    finally:
        proxy.close()


def test_search_results_with_lone_surrogates_are_cleaned_and_cached(site, tmp_path):
    search = SearchConfig(backend="searxng_json", options={"url": site.url + "/api/odd"})
    cache = CacheConfig(mode="readwrite", path=str(tmp_path))
    client = WebClient(safety=LOCAL_ONLY, fetch=FAST_FETCH, cache=cache, search=search)
    try:
        first = client.search("odd \ud800 query")
        assert not first.error, first.error
        result = first.results[0]
        assert result.title == "Broken \ufffd title" and "\ufffd" in result.snippet
        again = client.search("odd \ud800 query")
        assert again.cached and again.results == first.results
    finally:
        client.close()


def test_web_cache_round_trips_any_string(tmp_path):
    cache = WebCache(CacheConfig(mode="readwrite", path=str(tmp_path)))
    try:
        request = {"kind": "page", "url": "http://a.example/\udc80"}
        cache.put(request, {"text": "x \ud800 y"})
        assert cache.get(request) == {"text": "x \ud800 y"}
    finally:
        cache.close()


def test_a_deeply_nested_json_answer_is_a_search_error(site, tmp_path):
    search = SearchConfig(backend="searxng_json", options={"url": site.url + "/api/deep"})
    client = WebClient(safety=LOCAL_ONLY, fetch=FAST_FETCH, search=search)
    try:
        outcome = client.search("anything")
        assert not outcome.results and "nested too deeply" in outcome.error
    finally:
        client.close()
