"""BM25 search over WebShop's product documents (bm25s), returning the top 50 asins.

The original searches a Lucene index (pyserini) built with an English analyzer; here the same
documents (``catalogue.product_document``) are analyzed by ``textproc.search_tokens`` (lower-case,
Lucene's stop words, plural stemming) and scored by bm25s's Lucene-variant BM25 with pyserini's
defaults (k1=0.9, b=0.4). Only documents with a positive score are returned, best first, ties
broken by catalogue order, so results are deterministic.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from memrl.envs.webshop.textproc import search_tokens

logger = logging.getLogger(__name__)

SEARCH_RETURN_N = 50
"""Results per search (the original's SEARCH_RETURN_N)."""
MAX_CACHED_QUERY_CHARS = 1000
"""Longer queries are searched uncached, so the result cache stays small whatever agents type."""


class SearchIndex:
    """A BM25 index over documents; ``search`` returns document positions, best first."""

    def __init__(self, documents: Iterable[str], k1: float = 0.9, b: float = 0.4) -> None:
        import bm25s

        vocab: dict[str, int] = {}
        corpus_ids: list[list[int]] = []
        for doc in documents:
            ids = []
            for token in search_tokens(doc):
                tid = vocab.get(token)
                if tid is None:
                    tid = vocab[token] = len(vocab)
                ids.append(tid)
            corpus_ids.append(ids)
        self.num_docs = len(corpus_ids)
        if self.num_docs == 0:
            raise ValueError(
                "Cannot build a search index over 0 documents: the catalogue is empty."
            )
        self._bm25 = bm25s.BM25(k1=k1, b=b, method="lucene")
        self._bm25.index((corpus_ids, vocab), show_progress=False)
        self._vocab = vocab
        self._search_cached = lru_cache(maxsize=4096)(self._search)
        logger.info("Built a BM25 index over %d documents (%d terms)", self.num_docs, len(vocab))

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Positions of the top-k documents for a query (only positive scores), best first."""
        if len(query) > MAX_CACHED_QUERY_CHARS:
            return list(self._search(query, k))
        return list(self._search_cached(query, k))

    def _search(self, query: str, k: int) -> tuple[int, ...]:
        ids = [self._vocab[t] for t in search_tokens(query) if t in self._vocab]
        if not ids:
            return ()
        scores = self._bm25.get_scores(ids)
        positive = np.flatnonzero(scores > 0)
        if positive.size > k:
            top = positive[np.argpartition(-scores[positive], k - 1)[:k]]
            # argpartition's cut may split ties: re-include every document tied with the k-th
            # score so the tie-break below stays by catalogue order.
            kth = scores[top].min()
            top = positive[scores[positive] >= kth]
        else:
            top = positive
        order = np.lexsort((top, -scores[top]))
        return tuple(int(i) for i in top[order][:k])
