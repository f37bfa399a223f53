"""Passage retrieval for the QA envs: corpora, indexes (BM25, dense), the shared Ray service and
the Search-R1 HTTP protocol (server and client).

Modules: ``corpus`` (parquet/jsonl corpora), ``bm25`` and ``dense`` (indexes), ``local``
(in-process retriever), ``http`` (``POST /retrieve`` server and client), ``service`` (named Ray
actor). All retrievers implement ``base.Retriever.retrieve(queries, topk)``.
"""

from memrl.envs.retrieval.base import Hit, Retriever
from memrl.envs.retrieval.corpus import Corpus, Passage, load_corpus, save_corpus

__all__ = ["Corpus", "Hit", "Passage", "Retriever", "load_corpus", "save_corpus"]
