"""Safety and fetch configs of the web-search tests, and a process check (imported by tests).

Every config here allows only the host 127.0.0.1 (plus, where a test needs them, the literal
addresses 10.255.255.1 and 169.254.169.254 whose refusal is under test): Chromium's own
background requests go through the filtering proxy and are refused before any DNS lookup, so no
test contacts any address but 127.0.0.1.
"""

from __future__ import annotations

import contextlib

import psutil

from memrl.envs.web_search.config import FetchConfig, SafetyConfig

LOCAL_ONLY = SafetyConfig(allow_hosts=("127.0.0.1",), allow_addresses=("127.0.0.1",))
"""Only the test site; loopback allowed explicitly."""

WITH_DENIED_TARGETS = SafetyConfig(
    allow_hosts=("127.0.0.1", "10.255.255.1", "169.254.169.254"),
    allow_addresses=("127.0.0.1",),
    max_page_bytes=1_000_000,
)
"""Also lets the redirect targets past the host list, so the address check is what refuses them."""

FAST_FETCH = FetchConfig(
    page_load_timeout_s=3.0,
    settle_quiet_ms=300,
    settle_max_ms=2000,
    retries=1,
    backoff_s=0.1,
    min_host_interval_s=0.0,
)


def chromium_descendants() -> list[psutil.Process]:
    """Chromium/chromedriver processes under this test process (zombies included)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.name().startswith("chrom"):
                found.append(proc)
    return found
