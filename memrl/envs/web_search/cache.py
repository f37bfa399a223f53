"""On-disk cache of search results and pages: content-addressed blobs plus a SQLite index.

A request (``{"kind": "page", "url": ...}`` or ``{"kind": "search", "backend": ..., "query": ...}``,
plus the URL policy's fingerprint that ``WebClient`` adds to every request) hashes to a key; the
index maps the key to the SHA-256 of the stored JSON, which lives once under ``blobs/ab/abcdef...``
however many requests point at it. ``replay`` mode answers from the index
only, so a recorded run replays with no network at all. Text is stored as UTF-8, lone surrogates
(which a page or a search API may send) included as they are, so any string round-trips.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from memrl.envs.web_search.config import CacheConfig

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Part of every key: bump when what is stored (extraction, result fields) changes meaning."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
  key TEXT PRIMARY KEY,
  kind TEXT NOT NULL,
  request TEXT NOT NULL,
  blob TEXT NOT NULL,
  created REAL NOT NULL,
  hits INTEGER NOT NULL DEFAULT 0
)
"""


def request_key(request: dict[str, Any]) -> str:
    """Stable key of a request dict (sorted JSON, hashed with the format version)."""
    payload = json.dumps({"v": FORMAT_VERSION, **request}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(_utf8(payload)).hexdigest()


def _utf8(text: str) -> bytes:
    """UTF-8 bytes of any str, lone surrogates included (plain UTF-8 for well-formed text)."""
    return text.encode("utf-8", "surrogatepass")


class WebCache:
    """Thread-safe get/put of JSON values by request."""

    def __init__(self, config: CacheConfig) -> None:
        self.mode = config.mode
        self.root = Path(os.path.expanduser(config.path))
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if self.mode == "off":
            return
        index = self.root / "index.sqlite"
        if self.mode == "replay" and not index.is_file():
            raise FileNotFoundError(
                f"cache.mode='replay' needs a recorded cache, but {index} does not exist. Record "
                "one with cache.mode='readwrite' first, or point cache.path at it."
            )
        (self.root / "blobs").mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(index, check_same_thread=False, timeout=30)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)
            self._db.commit()

    @property
    def offline(self) -> bool:
        """True in replay mode: nothing may touch the network."""
        return self.mode == "replay"

    def _blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / digest[:2] / digest

    def get(self, request: dict[str, Any]) -> Any | None:
        """The stored value, or None (always None when the cache is off)."""
        if self._db is None:
            return None
        key = request_key(request)
        with self._lock:
            row = self._db.execute("SELECT blob FROM entries WHERE key = ?", (key,)).fetchone()
            if row is not None:
                self._db.execute("UPDATE entries SET hits = hits + 1 WHERE key = ?", (key,))
                self._db.commit()
        if row is None:
            self.misses += 1
            return None
        try:
            data = self._blob_path(row[0]).read_bytes()
        except FileNotFoundError:
            logger.warning("cache blob %s is missing; treating as a miss", row[0])
            self.misses += 1
            return None
        if hashlib.sha256(data).hexdigest() != row[0]:
            logger.warning("cache blob %s is corrupt; treating as a miss", row[0])
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(data.decode("utf-8", "surrogatepass"))

    def put(self, request: dict[str, Any], value: Any) -> None:
        """Stores a JSON-serializable value (a no-op when off or replaying)."""
        if self._db is None or self.mode != "readwrite":
            return
        data = _utf8(json.dumps(value, sort_keys=True, ensure_ascii=False))
        digest = hashlib.sha256(data).hexdigest()
        path = self._blob_path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO entries (key, kind, request, blob, created, hits) "
                "VALUES (?, ?, ?, ?, ?, 0)",
                (
                    request_key(request),
                    str(request.get("kind", "")),
                    json.dumps(request, sort_keys=True),
                    digest,
                    time.time(),
                ),
            )
            self._db.commit()

    def __len__(self) -> int:
        if self._db is None:
            return 0
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def close(self) -> None:
        if self._db is not None:
            with self._lock:
                self._db.close()
            self._db = None
