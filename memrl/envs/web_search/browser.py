"""One headless Chromium under Selenium (``Browser``); ``pool.py`` keeps N of them per process.

Each browser has a fresh profile directory, its own filtering proxy (``proxy.py``: every request
passes the URL policy; ``load`` itself refuses what the policy refuses before Chromium sees it,
since ``file:``, ``data:`` or ``chrome:`` URLs never reach a proxy), WebRTC held to proxied
traffic (no UDP around the proxy), and a watchdog that kills its whole process tree when an
operation runs past its timeouts, so a hung or crashed browser becomes a ``BrowserCrashed`` that
the pool answers with a restart. Shutdown quits the driver, kills what is left of the tree
(Chromium's crashpad helpers daemonize, so they are found by their profile path) and reaps the
zombies.
"""

from __future__ import annotations

import contextlib
import ctypes
import html
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memrl.envs.web_search.config import BrowserConfig, FetchConfig
from memrl.envs.web_search.policy import UrlDenied, UrlPolicy, host_of
from memrl.envs.web_search.proxy import BLOCKED_META, Event, SafetyProxy

logger = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
WEBRTC_POLICY = "disable_non_proxied_udp"
"""Chromium's WebRTC IP handling policy for our browsers: WebRTC may only use the proxy (which
refuses what the URL policy refuses), never UDP to an address of the page's choosing."""
_subreaper_lock = threading.Lock()
_subreaper_on = False

# Resolves once the DOM has had no mutation for `quiet` ms (or after `max` ms): content that
# scripts build after the load event is in the DOM by then.
_SETTLE_JS = """
const quiet = arguments[0], maxMs = arguments[1], done = arguments[arguments.length - 1];
const start = performance.now(); let last = start;
const obs = new MutationObserver(() => { last = performance.now(); });
obs.observe(document, {subtree: true, childList: true, characterData: true});
(function check() {
  const now = performance.now();
  if (now - last >= quiet || now - start >= maxMs) { obs.disconnect(); done(now - start); }
  else setTimeout(check, 50);
})();
"""

# Strings are made well-formed (lone surrogates become U+FFFD) before they leave the page:
# chromedriver cannot serialize a lone surrogate, which a page may hold or the cut may make by
# splitting a pair, and fails the whole call (measured: a restart per load of such a page).
_INFO_JS = """
const nav = performance.getEntriesByType('navigation')[0];
const root = document.documentElement;
const html = root ? root.outerHTML : '';
const wf = (s) => s.toWellFormed();
return {url: wf(location.href), title: wf(document.title || ''),
        contentType: document.contentType || '',
        status: (nav && nav.responseStatus) || 0, committed: window.__memrlPrev !== true,
        html: wf(html.slice(0, arguments[0])), htmlChars: html.length};
"""


class BrowserCrashed(Exception):
    """The browser died, hung, or stopped answering; the pool restarts it."""


@dataclass
class Loaded:
    """What one page load produced (``error`` set means no usable page)."""

    requested_url: str
    url: str = ""
    """Final URL after redirects."""
    title: str = ""
    html: str = ""
    html_chars: int = 0
    """Length of the whole DOM (``html`` is cut at ``max_html_chars``)."""
    status: int = 0
    """HTTP status of the document (0 when unknown)."""
    content_type: str = ""
    error: str = ""
    notes: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    """Proxy log of the load (document, subresources, redirects)."""
    seconds: float = 0.0


def enable_subreaper() -> bool:
    """Makes this process adopt orphaned descendants (Linux), so it can reap Chromium's helpers."""
    global _subreaper_on
    with _subreaper_lock:
        if _subreaper_on:
            return True
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper_on = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper_on = False
        return _subreaper_on


def reap_zombies(pids: set[int] | None = None) -> int:
    """Reaps zombie children that are Chromium processes (or in ``pids``); returns how many."""
    import psutil

    reaped = 0
    for child in psutil.Process().children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                continue
            if (pids is None or child.pid not in pids) and not child.name().startswith("chrom"):
                continue
            if os.waitpid(child.pid, os.WNOHANG)[0]:
                reaped += 1
        except (psutil.Error, ChildProcessError):
            continue
    return reaped


class Browser:
    """One headless Chromium driven through chromedriver."""

    def __init__(
        self,
        config: BrowserConfig,
        fetch: FetchConfig,
        policy: UrlPolicy,
        max_bytes: int,
        name: str = "browser-0",
    ) -> None:
        self.config = config
        self.fetch = fetch
        self.name = name
        self.proxy = SafetyProxy(policy, max_bytes, timeout_s=fetch.page_load_timeout_s + 5)
        self.driver: Any = None
        self.profile: str | None = None
        self._service: Any = None
        self.starts = 0
        self.start_seconds: list[float] = []
        self._lock = threading.RLock()

    def start(self) -> None:
        """Starts Chromium with a fresh profile (stops a running one first)."""
        with self._lock:
            if self.driver is not None:
                self.stop()
            self._start()

    def _start(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        cfg = self.config
        for path, what, package in (
            (cfg.chromium_path, "chromium_path", "chromium"),
            (cfg.chromedriver_path, "chromedriver_path", "chromium-driver"),
        ):
            if not Path(path).is_file():
                raise FileNotFoundError(
                    f"browser.{what}={path!r} does not exist. Install Debian's {package} "
                    f"(apt-get install chromium chromium-driver) or set browser.{what}."
                )
        if cfg.reap_orphans:
            enable_subreaper()
        t0 = time.monotonic()
        self.profile = tempfile.mkdtemp(prefix="memrl-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = cfg.chromium_path
        for flag in cfg.flags:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={self.profile}")
        options.add_argument(f"--proxy-server=http://{self.proxy.address}")
        options.add_argument("--proxy-bypass-list=<-loopback>")
        options.add_argument(f"--window-size={cfg.window_size[0]},{cfg.window_size[1]}")
        if self.fetch.user_agent:
            options.add_argument(f"--user-agent={self.fetch.user_agent}")
        options.add_experimental_option(
            "prefs",
            {
                "download.default_directory": os.path.join(self.profile, "downloads"),
                "download.prompt_for_download": False,
                # Preferences, not the --force-webrtc-ip-handling-policy switch, which Chromium
                # 156 ignores (host UDP candidates still gathered; measured).
                "webrtc.ip_handling_policy": WEBRTC_POLICY,
                "webrtc.multiple_routes_enabled": False,
                "webrtc.nonproxied_udp_enabled": False,
            },
        )
        # Chromium writes crash reports under $XDG_CONFIG_HOME: keep them in the fresh profile.
        env = dict(
            os.environ,
            XDG_CONFIG_HOME=os.path.join(self.profile, "xdg-config"),
            XDG_CACHE_HOME=os.path.join(self.profile, "xdg-cache"),
        )
        service = Service(executable_path=cfg.chromedriver_path, env=env)
        with self._watchdog(cfg.start_timeout_s, service=service) as fired:
            try:
                driver = webdriver.Chrome(service=service, options=options)
                driver.set_page_load_timeout(self.fetch.page_load_timeout_s)
                driver.set_script_timeout(self.fetch.settle_max_ms / 1000 + 5)
                driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "deny"})
            except Exception as err:
                self.driver, self._service = None, service
                self._kill_tree()
                shutil.rmtree(self.profile, ignore_errors=True)
                self.profile = None
                reason = "timed out" if fired.is_set() else f"{type(err).__name__}: {err}"
                raise BrowserCrashed(f"{self.name} failed to start: {reason}") from err
        self.driver, self._service = driver, service
        self.starts += 1
        self.start_seconds.append(time.monotonic() - t0)
        logger.info(
            "%s started in %.2f s (profile %s)", self.name, self.start_seconds[-1], self.profile
        )

    def stop(self) -> None:
        """Quits Chromium, kills leftovers of its process tree, reaps them, removes the profile."""
        with self._lock:
            if self.driver is None and self.profile is None:
                return
            pids = self.pids()
            if self.driver is not None and self.chromium_pid() is not None:
                with self._watchdog(10.0):
                    with contextlib.suppress(Exception):
                        self.driver.quit()
            self.driver = None
            self._kill_pids(pids | self.pids())
            if self.profile:
                shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    def close(self) -> None:
        """Stops the browser and its proxy for good."""
        self.stop()
        self.proxy.close()

    def restart(self) -> None:
        logger.warning("restarting %s", self.name)
        self.start()

    def pids(self) -> set[int]:
        """Live processes of this browser: chromedriver, Chromium and its helpers."""
        import psutil

        pids: set[int] = set()
        process = self._driver_process()
        if process is not None and process.poll() is None:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(process.pid)
                pids.add(root.pid)
                pids.update(c.pid for c in root.children(recursive=True))
        if self.profile:
            for proc in psutil.process_iter(["cmdline"]):
                cmdline = proc.info.get("cmdline") or []
                if any(self.profile in part for part in cmdline):
                    pids.add(proc.pid)
        return pids

    def chromium_pid(self) -> int | None:
        """PID of the main Chromium process (the driver's child), if running."""
        import psutil

        process = self._driver_process()
        if process is None or process.poll() is not None:
            return None
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(process.pid).children():
                if child.name().startswith("chrom"):
                    return child.pid
        return None

    def _driver_process(self) -> Any:
        """The chromedriver ``Popen`` (None before the first start)."""
        return getattr(self._service, "process", None)

    def alive(self) -> bool:
        return self.driver is not None and self.chromium_pid() is not None

    def _kill_tree(self) -> None:
        self._kill_pids(self.pids())

    def _kill_pids(self, pids: set[int]) -> None:
        import psutil

        procs = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    proc.send_signal(signal.SIGKILL)
                procs.append(proc)
        psutil.wait_procs(procs, timeout=5)
        process = self._driver_process()
        if process is not None:
            with contextlib.suppress(Exception):
                process.wait(timeout=5)
        reap_zombies(pids)

    @contextlib.contextmanager
    def _watchdog(self, seconds: float, service: Any = None) -> Iterator[threading.Event]:
        """Kills the process tree if the block runs longer than ``seconds`` (a hang)."""
        fired = threading.Event()

        def fire() -> None:
            fired.set()
            logger.warning("%s: no answer within %.1f s; killing it", self.name, seconds)
            if service is not None:
                self._service = service
            self._kill_tree()

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        timer.start()
        try:
            yield fired
        finally:
            timer.cancel()

    def load(self, url: str) -> Loaded:
        """Loads a URL, waits for the DOM to settle and returns the document.

        Failures of the page (timeouts, error pages, refusals, downloads) come back in
        ``Loaded.error``; failures of the browser raise ``BrowserCrashed``. A URL the policy
        refuses (a scheme other than http(s), a listed host, a port) is never handed to Chromium.
        """
        from selenium.common.exceptions import TimeoutException, WebDriverException

        try:
            self.proxy.policy.check_url(url)
        except UrlDenied as err:
            return Loaded(requested_url=url, error=f"denied: {err}")
        with self._lock:
            if self.driver is None:
                self._start()
            fetch = self.fetch
            out = Loaded(requested_url=url)
            net_error = ""
            seq = self.proxy.mark()
            t0 = time.monotonic()
            limit = (
                fetch.page_load_timeout_s + fetch.settle_max_ms / 1000 + self.config.hang_grace_s
            )
            with self._watchdog(limit) as fired:
                try:
                    self.driver.execute_script("window.__memrlPrev = true;")
                    try:
                        self.driver.get(url)
                    except TimeoutException:
                        out.notes.append(
                            f"page load timed out after {fetch.page_load_timeout_s:g} s"
                        )
                        self.driver.execute_script("window.stop();")
                    except WebDriverException as err:
                        # Network errors of the page (refused tunnel, DNS...) are not crashes.
                        code = re.search(r"net::(ERR_[A-Z_]+)", str(err))
                        if code is None:
                            raise
                        net_error = code.group(1)
                    with contextlib.suppress(TimeoutException):
                        self.driver.execute_async_script(
                            _SETTLE_JS, fetch.settle_quiet_ms, fetch.settle_max_ms
                        )
                    info = self.driver.execute_script(_INFO_JS, fetch.max_html_chars)
                except Exception as err:
                    if fired.is_set():
                        raise BrowserCrashed(
                            f"{self.name} hung (no answer in {limit:g} s)"
                        ) from err
                    if (
                        isinstance(err, WebDriverException)
                        or isinstance(err, OSError)
                        or (type(err).__module__.startswith("urllib3"))
                    ):
                        raise BrowserCrashed(
                            f"{self.name}: {type(err).__name__}: "
                            f"{str(err).splitlines()[0] if str(err) else ''}"
                        ) from err
                    raise
            if fired.is_set():
                raise BrowserCrashed(f"{self.name} hung (no answer in {limit:g} s)")
            out.seconds = time.monotonic() - t0
            out.events = self.proxy.events_since(seq)
            _fill(out, info, fetch.max_html_chars, net_error)
            return out


def _fill(out: Loaded, info: dict[str, Any], max_html_chars: int, net_error: str = "") -> None:
    """Turns the DOM facts and the proxy log into a ``Loaded`` (error or notes)."""
    out.url = info.get("url", "")
    out.title = info.get("title", "")
    out.status = int(info.get("status") or 0)
    out.content_type = info.get("contentType", "")
    out.html = info.get("html", "")
    out.html_chars = int(info.get("htmlChars") or 0)
    if not info.get("committed") and not net_error:
        chain = {out.requested_url} | {e.location for e in out.events if e.location}
        doc = [e for e in out.events if e.url in chain and not e.blocked and not e.location]
        kind = doc[-1].content_type if doc else ""
        if out.notes:  # timed out before anything was shown
            out.error = out.notes[0]
        elif kind:
            out.error = f"not a web page: the URL serves {kind.split(';')[0]}, which was not shown"
        else:
            out.error = "no page was shown for this URL (a download or an empty response)"
        return
    if net_error or out.url.startswith("chrome-error://"):
        # An HTTPS tunnel the proxy refused: find it among the hosts of this navigation's chain
        # (Chromium's own background requests are refused too and must not be blamed).
        chain = {host_of(out.requested_url)}
        chain |= {host_of(e.location) for e in out.events if e.location}
        blocked = [e for e in out.events if e.blocked and host_of(e.url) in chain]
        if blocked:
            out.error = f"denied: {blocked[-1].blocked}"
            return
        code = re.search(r"\b(ERR_[A-Z_]+)\b", out.html)
        code_text = net_error or (code.group(1) if code else "error page")
        out.error = f"the browser could not load the page ({code_text})"
        return
    meta = re.search(rf'<meta name="{BLOCKED_META}" content="([^"]*)"', out.html[:3000])
    if meta:
        out.error = f"denied: {html.unescape(meta.group(1))}"
        return
    for event in out.events:
        if event.truncated and event.url.split("#")[0] in (out.url, out.requested_url):
            out.notes.append(f"response cut at {event.bytes} bytes (page size cap)")
    if out.html_chars > max_html_chars:
        out.notes.append(f"DOM cut at {max_html_chars} of {out.html_chars} characters")
