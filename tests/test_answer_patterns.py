"""``scripts/answer_patterns.py``: answer and search patterns read from `memrl eval` transcripts."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "answer_patterns", REPO / "scripts" / "answer_patterns.py"
)
answer_patterns = importlib.util.module_from_spec(spec)
spec.loader.exec_module(answer_patterns)


def _episode(em: float, *generated: str) -> dict:
    return {"em": em, "turns": [{"generated": g} for g in generated]}


EPISODES = [
    # one value for both questions, the same search twice
    _episode(
        1.0,
        "<think>Q1: open</think>\n<search>Delves born year</search>",
        "<think>Q1: 1931</think>\n<search>Delves Born Year</search>",
        "<think>done</think>\n<answer>1931; 1931</answer>",
    ),
    # two different searches, two different values
    _episode(
        2.0,
        "<search>Montanko founded</search>",
        "<search>Tirfonmu founder</search>",
        "<answer>1854; Tirlenbur Nurkargur</answer>",
    ),
    # no answer at all (format error), one search
    _episode(0.0, "<search>Rongirmes</search>", "I do not know"),
]


def test_the_shares_of_each_pattern(tmp_path, capsys):
    r = answer_patterns.patterns(EPISODES, "search", "answer")
    assert r["episodes"] == 3
    assert r["em"] == pytest.approx(1.0)
    assert r["same_answer_for_all"] == pytest.approx(1 / 3)
    assert r["repeated_search"] == pytest.approx(1 / 3)  # queries compared without case
    assert r["two_distinct_searches"] == pytest.approx(1 / 3)

    path = tmp_path / "run.transcripts.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in EPISODES) + "\n")
    answer_patterns.main([str(path)])
    out = capsys.readouterr().out
    assert "3 episodes, EM 1.000; one value for every question 0.33" in out


def test_other_tags_and_a_file_that_is_not_a_transcript(tmp_path):
    renamed = [_episode(1.0, "<query>a</query>", "<query>b</query>", "<final>x; x</final>")]
    r = answer_patterns.patterns(renamed, "query", "final")
    assert r["same_answer_for_all"] == 1.0 and r["two_distinct_searches"] == 1.0

    bad = tmp_path / "metrics.json"
    bad.write_text(json.dumps({"em_mean": 0.4}) + "\n")
    with pytest.raises(SystemExit, match="not a memrl eval transcript file"):
        answer_patterns.main([str(bad)])
