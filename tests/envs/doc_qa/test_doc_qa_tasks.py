"""Task readers (FlashRAG, HotpotQA, synthetic), composition and parquet round trips."""

from __future__ import annotations

import json

import pytest

from memrl.envs.doc_qa.synthetic import SyntheticKB
from memrl.envs.doc_qa.tasks import (
    QAItem,
    compose_tasks,
    load_tasks,
    read_flashrag_jsonl,
    read_hotpotqa_json,
    save_tasks,
    synthetic_tasks,
)


def test_flashrag_reader_and_malformed_lines(tmp_path):
    path = tmp_path / "nq.jsonl"
    lines = [
        json.dumps({"id": "1", "question": "who wrote hamlet", "golden_answers": ["Shakespeare"]}),
        json.dumps(
            {"id": "2", "question": "capital of france", "golden_answers": ["Paris", "paris"]}
        ),
        json.dumps({"id": "3", "question": "no answers", "golden_answers": []}),
        json.dumps({"id": "4", "question": "a;b", "golden_answers": ["x;y"]}),
    ]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"nq\.jsonl:3"):
        read_flashrag_jsonl(path)
    items = read_flashrag_jsonl(path, skip_malformed=True)
    assert items[1] == QAItem("capital of france", ("Paris", "paris"))
    # ';' separates answers of a multi-objective task, so it cannot survive inside one.
    assert items[2] == QAItem("a,b", ("x,y",))


def test_hotpotqa_reader(tmp_path):
    path = tmp_path / "hotpot.json"
    path.write_text(
        json.dumps(
            [
                {"_id": "a", "question": "Q1?", "answer": "yes"},
                {"_id": "b", "question": "Q2?", "answer": "Paris"},
            ]
        )
    )
    assert read_hotpotqa_json(path) == [QAItem("Q1?", ("yes",)), QAItem("Q2?", ("Paris",))]
    path.write_text(json.dumps({"not": "a list"}))
    with pytest.raises(ValueError, match="JSON list"):
        read_hotpotqa_json(path)
    with pytest.raises(FileNotFoundError):
        read_hotpotqa_json(tmp_path / "missing.json")


def test_compose_and_parquet_round_trip(tmp_path):
    items = [QAItem(f"q{i}?", (f"a{i}", f"alias{i}")) for i in range(10)]
    tasks = compose_tasks(items, objectives=3, source="toy", split="test", seed=1)
    assert len(tasks) == 3  # 10 // 3, no question used twice
    used = [q for t in tasks for q in t.questions]
    assert len(set(used)) == 9
    for t in tasks:
        for q, a in zip(t.questions, t.answers, strict=True):
            assert a == (f"a{q[1:-1]}", f"alias{q[1:-1]}")
    path = save_tasks(tasks, tmp_path / "tasks" / "test.parquet")
    assert load_tasks(path) == tasks
    assert load_tasks(tmp_path / "tasks", split="test") == tasks
    with pytest.raises(ValueError, match="which split"):
        load_tasks(tmp_path / "tasks")
    with pytest.raises(FileNotFoundError, match="memrl data tasks"):
        load_tasks(tmp_path / "tasks", split="train")
    with pytest.raises(ValueError, match="cannot fill one task"):
        compose_tasks(items[:1], objectives=2, source="toy", split="test")


def test_synthetic_tasks_are_deterministic_per_index():
    kb = SyntheticKB(300, seed=0)
    few = synthetic_tasks(kb, objectives=3, num_tasks=5, split="train", seed=4)
    more = synthetic_tasks(kb, objectives=3, num_tasks=8, split="train", seed=4)
    assert more[:5] == few
    assert all(len(t.questions) == 3 == len(t.answers) for t in more)
    assert len({t.task_id for t in more}) == 8
    test = synthetic_tasks(kb, objectives=3, num_tasks=5, split="test", seed=4)
    assert not {q for t in test for q in t.questions} & {q for t in more for q in t.questions}
