"""The real headless Chromium against the local site: pages, failures, crashes, hangs, shutdown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading

import psutil
import pytest
from websearch_helpers import FAST_FETCH, WITH_DENIED_TARGETS, chromium_descendants

from memrl.envs.web_search.backends import build_backend
from memrl.envs.web_search.config import BrowserConfig, CacheConfig, SearchConfig
from memrl.envs.web_search.pool import BrowserPool
from memrl.envs.web_search.testsite import JS_FACT
from memrl.envs.web_search.web_client import WebClient


@pytest.fixture(scope="module")
def client(site):
    web = WebClient(
        browser=BrowserConfig(hang_grace_s=3.0),
        safety=WITH_DENIED_TARGETS,
        fetch=FAST_FETCH,
        cache=CacheConfig(mode="off"),
        search=SearchConfig(backend="html", options=site.search_options()),
    )
    yield web
    web.close()


def test_search_reads_the_results_page_in_the_browser(client, site):
    outcome = client.search("capital of zorbania")
    assert not outcome.error
    assert outcome.results[0].title == "Zorbania - facts"
    assert outcome.results[0].url == site.url + "/page/zorbania"
    assert "Quillton" in outcome.results[0].snippet


def test_page_text_without_navigation_scripts_or_styles(client, site):
    outcome = client.open(site.url + "/page/zorbania")
    page = outcome.page
    assert not outcome.error and page.status == 200
    assert page.title == "Zorbania - facts"
    assert "The capital of Zorbania is Quillton" in page.text
    for gone in ("tracking", "font-family", "LocalSite home", "Navigation footer"):
        assert gone not in page.text
    assert (("River Mell", site.url + "/page/mell-river")) in page.links


def test_javascript_built_content_comes_through(client, site):
    page = client.open(site.url + "/js").page
    assert JS_FACT in page.text
    assert "Loading..." not in page.text
    assert "spans the river Mell" in page.text


def test_slow_page_times_out_into_an_error(client, site):
    outcome = client.open(site.url + "/slow")
    assert outcome.page is None
    assert "timed out after 3 s" in outcome.error


def test_404_keeps_the_page_and_reports_the_status(client, site):
    outcome = client.open(site.url + "/missing")
    assert outcome.error == "HTTP 404"
    assert outcome.page.status == 404 and "No page at /missing" in outcome.page.text


@pytest.mark.parametrize(
    "path, reason",
    [
        ("/redirect-private", "private address 10.255.255.1"),
        ("/redirect-linklocal", "link-local address 169.254.169.254"),
        ("/redirect-https-private", "private address 10.255.255.1"),
    ],
)
def test_redirect_to_a_denied_address_is_refused(client, site, path, reason):
    outcome = client.open(site.url + path)
    assert outcome.page is None
    assert outcome.error.startswith("denied:") and reason in outcome.error


def test_searxng_html_preset_through_the_browser(client, site):
    backend = build_backend(
        SearchConfig(
            backend="searxng_html", options={"url_template": site.url + "/searx/search?q={query}"}
        )
    )
    results = backend.search("Ada Brisk engineer", client._load, client.http)
    assert results[0].url == site.url + "/page/ada-brisk"
    assert "invented engineer" in results[0].snippet


def test_unreachable_upstream_is_retried_then_reported(client):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    proxy = client.pool.browsers[0].proxy
    mark = proxy.mark()
    outcome = client.open(url)
    assert outcome.error == "HTTP 502"
    assert "upstream error" in outcome.page.text
    attempts = [e for e in proxy.events_since(mark) if e.url == url]
    assert len(attempts) == 1 + FAST_FETCH.retries


def test_direct_denied_url_never_reaches_the_browser(client):
    outcome = client.open("http://10.255.255.1/secret")
    assert outcome.error.startswith("denied:") and "private" in outcome.error
    assert client.open("file:///etc/passwd").error.startswith("denied: scheme 'file'")


def test_huge_page_is_cut_at_the_size_cap(client, site):
    page = client.open(site.url + "/huge").page
    assert page.text.startswith("HUGE PAGE START")
    assert any("cut at 1000000 bytes" in note for note in page.notes)
    assert len(page.text) < 1_000_000


def test_binary_file_is_skipped_with_a_note(client, site):
    outcome = client.open(site.url + "/file.bin")
    assert outcome.page is None
    assert "application/octet-stream" in outcome.error
    assert not os.path.exists(os.path.expanduser("~/Downloads/file.bin"))  # downloads denied


def test_plain_text_is_extracted(client, site):
    page = client.open(site.url + "/notes.txt").page
    assert page.content_type == "text/plain"
    assert "The mayor is Oren Vale." in page.text


def test_killed_browser_is_restarted(client, site):
    browser = client.pool.browsers[0]
    pid = browser.chromium_pid()
    assert pid is not None
    restarts = client.pool.restarts
    os.kill(pid, signal.SIGKILL)
    outcome = client.open(site.url + "/page/ada-brisk")
    assert not outcome.error and "Glimmer Bridge" in outcome.page.text
    assert client.pool.restarts == restarts + 1
    assert browser.chromium_pid() not in (None, pid)


def test_hung_browser_is_killed_by_the_watchdog_and_restarted(client, site):
    browser = client.pool.browsers[0]
    stopped = [p for p in browser.pids() if psutil.Process(p).name().startswith("chrom")]
    restarts = client.pool.restarts
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    outcome = client.open(site.url + "/page/mell-river")
    assert not outcome.error and "412 kilometres" in outcome.page.text
    assert client.pool.restarts >= restarts + 1
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in stopped)


def test_pool_of_two_serves_two_loads_at_once(site):
    pool = BrowserPool(BrowserConfig(pool_size=2), WITH_DENIED_TARGETS, FAST_FETCH)
    try:
        results = {}

        def load(name):
            results[name] = pool.load(f"{site.url}/page/{name}")

        threads = [threading.Thread(target=load, args=(n,)) for n in ("zorbania", "ada-brisk")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(not r.error and r.status == 200 for r in results.values())
        assert [b.starts for b in pool.browsers] == [1, 1]
    finally:
        pool.close()


def test_shutdown_leaves_no_chromium_process(site):
    pool = BrowserPool(BrowserConfig(pool_size=1), WITH_DENIED_TARGETS, FAST_FETCH)
    pool.load(site.url + "/page/zorbania")
    browser = pool.browsers[0]
    pids, profile = pool.pids(), browser.profile
    assert len(pids) >= 3 and os.path.isdir(profile)
    pool.close()
    assert not any(psutil.pid_exists(p) for p in pids), "a process (or zombie) of the pool remains"
    assert not os.path.exists(profile)
    by_profile = subprocess.run(["pgrep", "-f", profile], capture_output=True, text=True)
    assert by_profile.returncode == 1, by_profile.stdout
    by_name = subprocess.run(["pgrep", "-f", "chromium"], capture_output=True, text=True)
    assert not set(map(int, by_name.stdout.split())) & pids
    assert not [p for p in chromium_descendants() if p.pid in pids]


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "data:text/html,<p>inline page</p>",
        "chrome://version",
        "view-source:http://127.0.0.1/",
        "javascript:document.title='x'",
    ],
)
def test_browser_load_itself_refuses_other_schemes(client, url):
    loaded = client.pool.browsers[0].load(url)
    assert loaded.error.startswith("denied: scheme") and loaded.html == ""


# Collects the ICE candidates of a data channel (no STUN/TURN server): only host candidates could
# appear, each a UDP socket on a local interface that the proxy never sees.
_ICE_CANDIDATES_JS = """
const done = arguments[arguments.length - 1];
const pc = new RTCPeerConnection({iceServers: []});
const found = [];
pc.onicecandidate = (e) => {
  if (e.candidate) found.push(e.candidate.candidate); else done(found);
};
pc.createDataChannel('probe');
pc.createOffer().then((offer) => pc.setLocalDescription(offer));
setTimeout(() => done(found), 4000);
"""


def test_webrtc_cannot_send_udp_around_the_proxy(client, site):
    assert not client.open(site.url + "/page/zorbania").error
    candidates = client.pool.browsers[0].driver.execute_async_script(_ICE_CANDIDATES_JS)
    assert [c for c in candidates if " udp " in c.lower()] == []


def test_a_cached_page_is_not_served_to_a_stricter_policy(site, tmp_path):
    url = site.url + "/page/zorbania"
    lax = WebClient(
        safety=WITH_DENIED_TARGETS,
        fetch=FAST_FETCH,
        cache=CacheConfig(mode="readwrite", path=str(tmp_path)),
    )
    try:
        assert not lax.open(url).error and lax.open(url).cached
    finally:
        lax.close()
    for mode in ("readwrite", "replay"):
        strict = WebClient(fetch=FAST_FETCH, cache=CacheConfig(mode=mode, path=str(tmp_path)))
        try:
            outcome = strict.open(url)
            assert outcome.page is None and not outcome.cached
            assert outcome.error.startswith("denied:") and "loopback" in outcome.error
            assert strict._pool is None  # refused before any browser was needed
        finally:
            strict.close()
