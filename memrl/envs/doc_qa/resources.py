"""Per-process cache of what doc-QA envs share: knowledge bases, corpora, indexes and tasks.

Many envs in one env runner (and the tests) ask for the same synthetic KB or the same index;
building it once per process keeps reset cheap. Everything here is read-only once built.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_LOCK = threading.RLock()
_CACHE: dict[tuple, Any] = {}
_WORLDS: OrderedDict[tuple, Any] = OrderedDict()
MAX_TASK_WORLDS = 512
"""Per-task synthetic worlds (``redraw``) kept per process; ~10 ms to rebuild one."""


def _cached(key: tuple, build):
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = build()
        return _CACHE[key]


def synthetic_kb(num_passages: int, seed: int, passage_words: int = 0):
    """The ``SyntheticKB`` of (num_passages, seed, passage_words), built once per process."""
    from memrl.envs.doc_qa.synthetic import SyntheticKB

    return _cached(
        ("kb", num_passages, seed, passage_words),
        lambda: SyntheticKB(num_passages, seed, passage_words),
    )


def synthetic_retriever(
    num_passages: int,
    seed: int,
    show_progress: bool = False,
    passage_words: int = 0,
    task: tuple[str, str, int] | None = None,
):
    """A BM25 ``LocalRetriever`` over the synthetic KB's corpus, built once per process.

    With ``task=(redraw, split, index)``: over that task's own KB (``tasks.task_kb``); these small
    per-task worlds are kept in a bounded LRU (``MAX_TASK_WORLDS``) instead of the cache.
    """
    from memrl.envs.doc_qa.tasks import task_kb
    from memrl.envs.retrieval.local import LocalRetriever, build_index

    def build():
        kb = synthetic_kb(num_passages, seed, passage_words)
        if task is not None:
            kb = task_kb(kb, *task)
        corpus = kb.corpus
        return LocalRetriever(corpus, build_index(corpus, "bm25", show_progress=show_progress))

    if task is None or task[0] == "none":
        return _cached(("synthetic_retriever", num_passages, seed, passage_words), build)
    key = (num_passages, seed, passage_words, *task)
    with _LOCK:
        if key in _WORLDS:
            _WORLDS.move_to_end(key)
            return _WORLDS[key]
        retriever = _WORLDS[key] = build()
        while len(_WORLDS) > MAX_TASK_WORLDS:
            _WORLDS.popitem(last=False)
        return retriever


def local_retriever(corpus_path: str | None, index_path: str | None, kind: str = "bm25"):
    """A ``LocalRetriever`` over a corpus file and a saved index (built in memory if none).

    Without ``corpus_path`` the corpus recorded in the index folder is used.
    """
    from memrl.envs.retrieval.bm25 import read_index_meta
    from memrl.envs.retrieval.corpus import load_corpus
    from memrl.envs.retrieval.local import LocalRetriever, build_index, load_index

    if corpus_path is None:
        if index_path is None:
            raise ValueError("local_retriever needs a corpus file or an index folder.")
        corpus_path = read_index_meta(index_path).get("corpus")
        if corpus_path is None:
            raise ValueError(f"{index_path} records no corpus; pass the corpus file too.")

    def build():
        corpus, _ = load_corpus(corpus_path)
        index = load_index(index_path) if index_path else build_index(corpus, kind)
        return LocalRetriever(corpus, index)

    index_key = str(Path(index_path).resolve()) if index_path else None
    key = ("local_retriever", str(Path(corpus_path).resolve()), index_key, kind)
    return _cached(key, build)


def tasks_from_file(path: str, split: str):
    """Tasks of one split from a tasks parquet file or folder."""
    from memrl.envs.doc_qa.tasks import load_tasks

    return _cached(("tasks", str(Path(path).resolve()), split), lambda: load_tasks(path, split))


def cached_synthetic_tasks(
    num_passages: int,
    seed: int,
    objectives: int,
    num_tasks: int,
    split: str,
    test_fraction: float,
    multi_hop_fraction: float,
    redraw: str = "none",
):
    """Synthetic tasks of one split, built once per process."""
    from memrl.envs.doc_qa import tasks

    def build():
        kb = synthetic_kb(num_passages, seed)
        return tasks.synthetic_tasks(
            kb, objectives, num_tasks, split, seed, test_fraction, multi_hop_fraction, redraw
        )

    key = ("synthetic_tasks", num_passages, seed, objectives, num_tasks, split, test_fraction,
           multi_hop_fraction, redraw)  # fmt: skip
    return _cached(key, build)


def clear() -> None:
    """Drops everything cached (tests use it to measure cold builds)."""
    with _LOCK:
        _CACHE.clear()
        _WORLDS.clear()
