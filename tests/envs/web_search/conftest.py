"""Fixtures of the web-search tests: the local site on 127.0.0.1 and the leftover-process check."""

from __future__ import annotations

import pytest
from websearch_helpers import chromium_descendants

from memrl.envs.web_search.testsite import LocalSite


@pytest.fixture(scope="session", autouse=True)
def no_browser_left_behind():
    """After the whole session, no Chromium process of ours may remain (not even a zombie)."""
    yield
    left = [(p.pid, p.name()) for p in chromium_descendants()]
    assert not left, f"Chromium processes outlived the tests: {left}"


@pytest.fixture(scope="session")
def site():
    with LocalSite(slow_delay_s=8.0, huge_bytes=3_000_000) as local:
        yield local
