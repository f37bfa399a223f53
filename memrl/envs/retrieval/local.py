"""In-process retrieval: a corpus plus an index over it, and the builders of both.

``build_index`` / ``load_index`` dispatch on the index kind (``bm25`` or ``dense``);
``LocalRetriever`` turns index rows into ``Hit``s with the corpus rows they point at.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from memrl.envs.retrieval.base import Hit, check_topk
from memrl.envs.retrieval.bm25 import BM25Index, read_index_meta
from memrl.envs.retrieval.corpus import Corpus

logger = logging.getLogger(__name__)

INDEX_KINDS = ("bm25", "dense")
"""Index kinds memrl builds."""


def build_index(corpus: Corpus, kind: str = "bm25", show_progress: bool = True, **kwargs: Any):
    """Builds an index of ``kind`` over ``corpus`` (rows in corpus order).

    Args:
        corpus: the passages.
        kind: ``bm25`` (default) or ``dense`` (needs the ``dense`` extra).
        show_progress: draw progress bars.
        **kwargs: options of the index class (BM25: ``k1``, ``b``; dense: ``encoder``,
            ``batch_size``).
    """
    if kind == "bm25":
        return BM25Index.build(
            corpus.iter_texts(), num_docs=len(corpus), show_progress=show_progress, **kwargs
        )
    if kind == "dense":
        from memrl.envs.retrieval.dense import DenseIndex

        return DenseIndex.build(
            corpus.iter_texts(), num_docs=len(corpus), show_progress=show_progress, **kwargs
        )
    raise ValueError(f"Unknown index kind {kind!r}. Available: {list(INDEX_KINDS)}.")


def load_index(folder: str | Path, mmap: bool = True):
    """Opens a saved index of any kind (the folder's ``memrl_index.json`` says which)."""
    kind = read_index_meta(folder).get("kind")
    if kind == "bm25":
        return BM25Index.load(folder, mmap=mmap)
    if kind == "dense":
        from memrl.envs.retrieval.dense import DenseIndex

        return DenseIndex.load(folder, mmap=mmap)
    raise ValueError(f"{folder}: unknown index kind {kind!r}. Available: {list(INDEX_KINDS)}.")


class LocalRetriever:
    """Answers queries from an index held in this process.

    Args:
        corpus: the passages the index was built over.
        index: an index with ``num_docs`` and ``search(queries, topk)`` (BM25 or dense).
    """

    def __init__(self, corpus: Corpus, index) -> None:
        if index.num_docs != len(corpus):
            raise ValueError(
                f"The index covers {index.num_docs} passages but the corpus has {len(corpus)}: "
                "it was built over another corpus. Rebuild it with `memrl data index`."
            )
        self.corpus = corpus
        self.index = index

    def retrieve(self, queries: list[str], topk: int) -> list[list[Hit]]:
        """For each query, up to ``topk`` hits, best first."""
        check_topk(topk)
        results = self.index.search(list(queries), topk)
        out = []
        for rows in results:
            passages = self.corpus.take([row for row, _ in rows])
            out.append(
                [
                    Hit(id=p.id, title=p.title, text=p.text, score=score)
                    for p, (_, score) in zip(passages, rows, strict=True)
                ]
            )
        return out
