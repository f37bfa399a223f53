"""``BrowserPool``: N headless browsers per process, shared by its envs, restarted when they fail.

An env runner process builds one pool per distinct config (``BrowserPool.shared``, reference
counted), so its envs share ``pool_size`` browsers. A load that finds its browser crashed or hung
restarts that browser (fresh profile) and tries again; what still fails comes back in
``Loaded.error``. ``close`` (and, failing that, an ``atexit`` hook) leaves no Chromium behind.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import threading
import time
import weakref
from collections.abc import Iterator

from memrl.envs.web_search.browser import Browser, BrowserCrashed, Loaded
from memrl.envs.web_search.config import BrowserConfig, FetchConfig, SafetyConfig
from memrl.envs.web_search.policy import UrlPolicy

logger = logging.getLogger(__name__)

_live_pools: weakref.WeakSet[BrowserPool] = weakref.WeakSet()


class BrowserPool:
    """N browsers shared by the envs of one process; a crashed or hung browser is restarted."""

    _shared: dict[tuple, tuple[BrowserPool, int]] = {}
    _shared_lock = threading.Lock()

    def __init__(self, config: BrowserConfig, safety: SafetyConfig, fetch: FetchConfig) -> None:
        if config.pool_size < 1:
            raise ValueError(f"browser.pool_size must be >= 1, got {config.pool_size}")
        self.config, self.safety, self.fetch = config, safety, fetch
        self.policy = UrlPolicy(safety)
        self.browsers = [
            Browser(config, fetch, self.policy, safety.max_page_bytes, name=f"browser-{i}")
            for i in range(config.pool_size)
        ]
        self._free: queue.Queue[Browser] = queue.Queue()
        for browser in self.browsers:
            self._free.put(browser)
        self.restarts = 0
        self._closed = False
        _live_pools.add(self)

    @classmethod
    def shared(cls, config: BrowserConfig, safety: SafetyConfig, fetch: FetchConfig) -> BrowserPool:
        """The process-wide pool for these configs (reference counted; see ``release``)."""
        key = (config, safety, fetch)
        with cls._shared_lock:
            pool, refs = cls._shared.get(key, (None, 0))
            if pool is None or pool._closed:
                pool, refs = cls(config, safety, fetch), 0
            cls._shared[key] = (pool, refs + 1)
            return pool

    def release(self) -> None:
        """Drops one reference from ``shared``; the last one closes the pool."""
        with self._shared_lock:
            key = (self.config, self.safety, self.fetch)
            pool, refs = self._shared.get(key, (None, 0))
            if pool is not self:
                self.close()
                return
            if refs <= 1:
                del self._shared[key]
                self.close()
            else:
                self._shared[key] = (pool, refs - 1)

    def start(self) -> None:
        """Starts every browser now (otherwise each starts on first use)."""
        for browser in self.browsers:
            if browser.driver is None:
                browser.start()

    @contextlib.contextmanager
    def acquire(self, timeout: float | None = None) -> Iterator[Browser]:
        """Borrows a browser for one operation."""
        if self._closed:
            raise RuntimeError("BrowserPool is closed")
        browser = self._free.get(timeout=timeout)
        try:
            yield browser
        finally:
            self._free.put(browser)

    def load(self, url: str) -> Loaded:
        """Loads a page on a free browser; a crash restarts the browser and retries.

        Never raises for page or browser failures: they come back in ``Loaded.error``.
        """
        last = ""
        with self.acquire() as browser:
            for attempt in range(self.fetch.retries + 1):
                try:
                    return browser.load(url)
                except BrowserCrashed as err:
                    last = str(err)
                    logger.warning("%s (attempt %d); restarting", err, attempt + 1)
                    self.restarts += 1
                    try:
                        browser.restart()
                    except BrowserCrashed as start_err:
                        last = str(start_err)
                    if attempt < self.fetch.retries:
                        time.sleep(self.fetch.backoff_s * 2**attempt)
        return Loaded(requested_url=url, error=f"browser failure: {last}")

    def pids(self) -> set[int]:
        return set().union(*(b.pids() for b in self.browsers))

    def close(self) -> None:
        """Stops every browser (no Chromium process outlives this)."""
        if self._closed:
            return
        self._closed = True
        for browser in self.browsers:
            browser.close()


@atexit.register
def _close_live_pools() -> None:
    # A pool nobody closed must still not leave Chromium running after the interpreter exits.
    for pool in list(_live_pools):
        with contextlib.suppress(Exception):
            pool.close()
