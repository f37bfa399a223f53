"""BM25 index over a corpus, built with bm25s, saved to a folder and memory-mapped on load.

memrl tokenizes itself (lowercase word characters, English stopwords dropped, no stemming: PyStemmer
is not a dependency) and hands bm25s token ids, so that building streams the corpus once and the
query side uses the very same function. Scoring is bm25s' sparse score matrix (Lucene BM25,
k1=1.5, b=0.75); top-k selection is one ``argpartition`` per query.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


def _import_bm25s():
    """``bm25s``, with its logger put back to WARNING: the package sets it to DEBUG on import,
    which logs a line per index built (thousands in a run that builds an index per task)."""
    import bm25s

    bm25_logger = logging.getLogger("bm25s")
    if bm25_logger.level == logging.DEBUG:
        bm25_logger.setLevel(logging.WARNING)
    return bm25s


INDEX_META = "memrl_index.json"
"""File in an index folder that says what kind of index it holds and over how many passages."""

_TOKEN = re.compile(r"\w+", re.UNICODE)
_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without English stopwords (the same for passages and queries)."""
    return [tok for tok in _TOKEN.findall(text.lower()) if tok not in _STOPWORDS]


class BM25Index:
    """A BM25 index whose row ``i`` is corpus row ``i``.

    Build with ``BM25Index.build(texts)``, persist with ``save(folder)``, reopen with
    ``BM25Index.load(folder)`` (arrays memory-mapped, so N processes share the page cache).
    """

    kind = "bm25"

    def __init__(self, model, num_docs: int) -> None:
        self._model = model
        self.num_docs = num_docs
        self._vocab: dict[str, int] = model.vocab_dict
        scores = model.scores
        self._data = scores["data"]
        self._indices = scores["indices"]
        self._indptr = scores["indptr"]

    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        num_docs: int | None = None,
        show_progress: bool = True,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> BM25Index:
        """Indexes texts (one per corpus row, in order).

        Args:
            texts: passage texts (title and body), in corpus order.
            num_docs: how many texts there are, for the progress bar.
            show_progress: draw tqdm progress bars while tokenizing and scoring.
            k1: BM25 term-frequency saturation.
            b: BM25 length normalization.
        """
        from tqdm.auto import tqdm

        bm25s = _import_bm25s()

        start = time.perf_counter()
        vocab: dict[str, int] = {}
        doc_ids: list[list[int]] = []
        for text in tqdm(texts, total=num_docs, desc="BM25 tokenize", disable=not show_progress):
            ids = []
            for tok in tokenize(text):
                tid = vocab.get(tok)
                if tid is None:
                    tid = vocab[tok] = len(vocab)
                ids.append(tid)
            doc_ids.append(ids)
        if not doc_ids:
            raise ValueError("Cannot build a BM25 index over an empty corpus: it has 0 passages.")
        # bm25s scores a query with no known token by an all-zero vector; the empty token keeps
        # its vocabulary non-empty even for a corpus of stopwords only.
        vocab.setdefault("", len(vocab))
        model = bm25s.BM25(k1=k1, b=b, method="lucene")
        model.index((doc_ids, vocab), show_progress=show_progress)
        logger.info(
            "BM25 index: %d passages, %d terms in %.1fs",
            len(doc_ids),
            len(vocab),
            time.perf_counter() - start,
        )
        return cls(model, len(doc_ids))

    def save(self, folder: str | Path, extra_meta: dict | None = None) -> Path:
        """Writes the index arrays, vocabulary and parameters into ``folder``.

        The files are written aside and moved in at the end (``files.replacing_files_in``): an
        index already in the folder stays whole until the new one is complete.

        Args:
            folder: target folder (created if needed).
            extra_meta: more keys for ``memrl_index.json`` (e.g. the corpus path).
        """
        from memrl.envs.files import replacing_files_in

        with replacing_files_in(folder, INDEX_META) as staging:
            self._model.save(str(staging), show_progress=False)
            write_index_meta(staging, self, {"tokenizer": "memrl-v1", **(extra_meta or {})})
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True) -> BM25Index:
        """Opens an index saved by ``save`` (memory-mapped unless ``mmap=False``)."""
        bm25s = _import_bm25s()

        meta = read_index_meta(folder)
        if meta.get("kind") != cls.kind:
            raise ValueError(
                f"{folder} holds a {meta.get('kind')!r} index, not a BM25 one; "
                "open it with load_index() or rebuild it with `memrl data index --kind bm25`."
            )
        model = bm25s.BM25.load(str(folder), mmap=mmap, show_progress=False)
        return cls(model, int(meta["num_docs"]))

    def search(self, queries: list[str], topk: int) -> list[list[tuple[int, float]]]:
        """For each query, up to ``topk`` (row, score) pairs with a positive score, best first."""
        out = []
        for query in queries:
            ids = [self._vocab[t] for t in tokenize(query) if t in self._vocab]
            if not ids:
                out.append([])
                continue
            scores = self._scores(ids)
            out.append(_top_positive(scores, topk))
        return out

    def _scores(self, token_ids: list[int]) -> np.ndarray:
        scores = np.zeros(self.num_docs, dtype=np.float32)
        for tid in token_ids:
            start, end = self._indptr[tid], self._indptr[tid + 1]
            # A term's column lists each document at most once, so fancy-index += is exact.
            scores[self._indices[start:end]] += self._data[start:end]
        return scores


def _top_positive(scores: np.ndarray, topk: int) -> list[tuple[int, float]]:
    # Select among the positive scores only: most rows score 0, and introselect over an array
    # of mostly equal values can be 50x slower than over the few candidates.
    cand = np.flatnonzero(scores > 0)
    if cand.size > topk:
        cand = cand[np.argpartition(-scores[cand], topk - 1)[:topk]]
    # Stable on ties: higher score first, then lower row index, so results are reproducible.
    order = np.lexsort((cand, -scores[cand]))
    return [(int(cand[i]), float(scores[cand[i]])) for i in order]


def write_index_meta(folder: Path, index: Any, extra: dict[str, Any]) -> None:
    """Writes the ``memrl_index.json`` of an index folder: its kind, size and ``extra``."""
    meta = {"kind": index.kind, "num_docs": index.num_docs, **extra}
    (folder / INDEX_META).write_text(json.dumps(meta))


def read_index_meta(folder: str | Path) -> dict:
    """Reads the ``memrl_index.json`` of an index folder."""
    path = Path(folder) / INDEX_META
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder} is not a memrl index folder (no {INDEX_META}). Build one with "
            "`memrl data index --corpus CORPUS --output FOLDER`."
        )
    return json.loads(path.read_text())
