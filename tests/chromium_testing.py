"""A headless Chromium driven by Selenium for tests, and the clean-up that leaves nothing behind.

`driver.quit()` alone is not enough: Chromium's crashpad helpers exit late, and when another test
made this process a child subreaper they come back to it as children that must be reaped. The
web-search conftest checks at the end of the session that no Chromium process outlived the tests.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator

import psutil

from memrl.envs.web_search.config import DEFAULT_CHROME_FLAGS

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@contextlib.contextmanager
def chromium_driver(*extra_flags: str, capabilities: dict | None = None) -> Iterator:
    """A selenium Chrome driver on Debian's chromium with a throwaway profile; ended for good."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert os.path.isfile(CHROMIUM) and os.path.isfile(CHROMEDRIVER), (
        "the browser tests need Debian's chromium and chromium-driver (make browser)"
    )
    with tempfile.TemporaryDirectory(prefix="memrl-test-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*DEFAULT_CHROME_FLAGS, f"--user-data-dir={profile}", *extra_flags):
            options.add_argument(flag)
        for key, value in (capabilities or {}).items():
            options.set_capability(key, value)
        env = dict(os.environ, XDG_CONFIG_HOME=profile, XDG_CACHE_HOME=profile)
        driver = webdriver.Chrome(
            service=Service(executable_path=CHROMEDRIVER, env=env), options=options
        )
        driver.set_page_load_timeout(30)
        tree = psutil.Process(driver.service.process.pid).children(recursive=True)
        try:
            yield driver
        finally:
            with contextlib.suppress(Exception):
                driver.quit()
            end_leftovers(tree, profile)


def end_leftovers(tree: list[psutil.Process], profile: str) -> None:
    """Kills and reaps what `quit()` left: the browser tree, anything using `profile`, and
    Chromium children of this process (crashpad handlers re-parented here)."""
    _, alive = psutil.wait_procs(tree, timeout=5)
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if profile in " ".join(proc.info["cmdline"] or []):
                alive.append(proc)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    deadline = time.time() + 10
    while time.time() < deadline:
        kids = []
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                if child.name().startswith("chrom"):
                    kids.append(child)
        if not kids:
            return
        for child in kids:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
                if child.status() != psutil.STATUS_ZOMBIE:
                    child.kill()
                child.wait(timeout=1)
        time.sleep(0.1)
