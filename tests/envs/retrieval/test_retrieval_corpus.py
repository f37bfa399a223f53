"""Corpus loaders: Wikipedia-2018 jsonl, plain jsonl, parquet; malformed lines."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memrl.envs.retrieval.corpus import (
    Corpus,
    load_corpus,
    save_corpus,
    split_contents,
    to_contents,
)


def _write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_wiki_jsonl_splits_title_and_text(tmp_path):
    path = _write_lines(
        tmp_path / "wiki.jsonl",
        [
            json.dumps({"id": "1", "contents": '"Aaron"\nAaron is a prophet.'}),
            json.dumps({"id": 2, "contents": '"Zürich"\nA city; "quoted" text\nsecond line'}),
        ],
    )
    corpus, skipped = load_corpus(path)
    assert skipped == 0 and len(corpus) == 2
    assert corpus[0].title == "Aaron" and corpus[0].text == "Aaron is a prophet."
    assert corpus[1].id == "2" and corpus[1].title == "Zürich"
    assert corpus[1].text == 'A city; "quoted" text\nsecond line'
    assert corpus[0].contents() == '"Aaron"\nAaron is a prophet.'


def test_plain_jsonl_and_parquet_round_trip(tmp_path):
    path = _write_lines(
        tmp_path / "plain.jsonl",
        [json.dumps({"id": f"d{i}", "title": f"T{i}", "text": f"text {i}"}) for i in range(5)],
    )
    corpus, _ = load_corpus(path)
    out = save_corpus(corpus, tmp_path / "c.parquet")
    again, skipped = load_corpus(out)
    assert skipped == 0
    assert again.table.equals(corpus.table)
    assert [p.id for p in again.take([4, 0])] == ["d4", "d0"]


def test_parquet_with_contents_column_and_int_ids(tmp_path):
    table = pa.table({"id": [7, 8], "contents": ['"A"\nfirst', '"B"\nsecond']})
    pq.write_table(table, tmp_path / "c.parquet")
    corpus, _ = load_corpus(tmp_path / "c.parquet")
    assert [(p.id, p.title, p.text) for p in corpus.take([0, 1])] == [
        ("7", "A", "first"),
        ("8", "B", "second"),
    ]


def test_malformed_line_names_file_and_line(tmp_path):
    path = _write_lines(
        tmp_path / "bad.jsonl",
        [
            json.dumps({"id": "1", "contents": '"A"\nok'}),
            "{not json",
            json.dumps({"id": "3", "contents": 5}),
            json.dumps(["a list"]),
            json.dumps({"id": "5", "contents": '"E"\nok'}),
        ],
    )
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: malformed") as err:
        load_corpus(path)
    assert "--skip-malformed" in str(err.value)
    corpus, skipped = load_corpus(path, skip_malformed=True)
    assert skipped == 3
    assert [p.id for p in corpus.take([0, 1])] == ["1", "5"]


def test_missing_file_and_bad_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="memrl data corpus"):
        load_corpus(tmp_path / "nope.parquet")
    path = _write_lines(tmp_path / "x.jsonl", [json.dumps({"id": "1", "text": "t"})])
    with pytest.raises(ValueError, match="Unknown corpus format"):
        load_corpus(path, format="csv")


def test_parquet_missing_columns_is_explained(tmp_path):
    pq.write_table(pa.table({"id": ["1"], "body": ["x"]}), tmp_path / "c.parquet")
    with pytest.raises(ValueError, match="Missing"):
        load_corpus(tmp_path / "c.parquet")


def test_contents_helpers_are_inverse():
    assert split_contents(to_contents("Title", "body\nmore")) == ("Title", "body\nmore")
    assert split_contents("no title line") == ("", "no title line")
    corpus = Corpus.from_records([{"id": 1, "title": "t", "text": "x"}])
    assert corpus[0].id == "1" and corpus[-1].title == "t"
    with pytest.raises(IndexError):
        corpus[1]
