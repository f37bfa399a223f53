"""`memrl bench mem1-context` with the scripted agent: short vs Wikipedia-length passages."""

from __future__ import annotations

import argparse

import pandas as pd
import pytest

from memrl.bench import mem1_context


def _args(tmp_path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    mem1_context.add_arguments(parser)
    return parser.parse_args(
        ["--objectives", "2", "4", "--tasks", "2", "--batch", "2", "--synthetic-passages", "110",
         "--output", str(tmp_path), *extra]
    )  # fmt: skip


def test_default_is_the_papers_setting(tmp_path):
    args = _args(tmp_path)
    assert args.passage_words == [100] and args.topk == 3


def test_long_passages_enlarge_observations_and_widen_the_gap(tmp_path):
    assert mem1_context.run(_args(tmp_path, "--passage-words", "0", "100")) == 0
    rows = pd.read_parquet(tmp_path / "mem1_context.parquet")
    assert set(rows["passage_words"]) == {0, 100}
    assert (rows["em"] == rows["objectives"]).all()  # the scripted agent solves every task
    by = rows.set_index(["passage_words", "policy", "objectives"])
    for n in (2, 4):
        # Observations are ~3 x 100 words with long passages, far more than with short ones.
        assert by.loc[(100, "mem1", n), "obs_tokens"] > 2 * by.loc[(0, "mem1", n), "obs_tokens"]
        for words in (0, 100):
            assert (
                by.loc[(words, "mem1", n), "peak_tokens"]
                < by.loc[(words, "full", n), "peak_tokens"]
            )
        # Longer observations make mem1's saving larger (full context keeps every one of them).
        ratio = {
            w: by.loc[(w, "mem1", n), "dependency"] / by.loc[(w, "full", n), "dependency"]
            for w in (0, 100)
        }
        assert ratio[100] < ratio[0]
    assert "100 words/N=4" in (tmp_path / "mem1_context.md").read_text()


def test_two_hop_questions_take_two_searches_each_and_widen_the_gap(tmp_path):
    args = _args(tmp_path, "--passage-words", "0", "--multi-hop-fraction", "0", "1")
    assert mem1_context.run(args) == 0
    rows = pd.read_parquet(tmp_path / "mem1_context.parquet")
    assert (rows["em"] == rows["objectives"]).all()
    by = rows.set_index(["multi_hop_fraction", "policy", "objectives"])
    for n in (2, 4):
        # One search per one-hop question, two per two-hop question, then one answer turn.
        assert by.loc[(0.0, "mem1", n), "turns"] == n + 1
        assert by.loc[(1.0, "mem1", n), "turns"] == 2 * n + 1
        ratio = {
            h: by.loc[(h, "mem1", n), "dependency"] / by.loc[(h, "full", n), "dependency"]
            for h in (0.0, 1.0)
        }
        assert ratio[1.0] < ratio[0.0]
    assert "short, 1 two-hop/N=4" in (tmp_path / "mem1_context.md").read_text()
    with pytest.raises(ValueError, match="multi-hop-fraction must lie in"):
        mem1_context.run(_args(tmp_path, "--multi-hop-fraction", "1.5"))
