"""The worked example of docs/mem1.md: HotpotQA- and NQ-format JSONL plus a passage file become
doc-QA tasks and an index with `memrl data qa`, and the env answers from them."""

from __future__ import annotations

import json

import pytest
from memrl_testing import REPO, memrl_cli

from memrl.data.qa import read_questions
from memrl.envs.doc_qa.env import DocQAEnv

SAMPLE = REPO / "tests" / "fixtures" / "qa_sample"


def test_hotpotqa_and_nq_files_become_tasks_and_an_index(tmp_path):
    out = tmp_path / "qa"
    hotpot = memrl_cli(
        "data", "qa", "--questions", str(SAMPLE / "hotpotqa_train.jsonl"),
        "--passages", str(SAMPLE / "passages.jsonl"), "--objectives", "2",
        "--split", "train", "--output", str(out),
    )  # fmt: skip
    assert hotpot.returncode == 0, hotpot.stderr[-2000:]
    assert "wrote 3 train tasks of 2 questions" in hotpot.stdout
    assert "bm25 index over 12 passages" in hotpot.stdout
    nq = memrl_cli(
        "data", "qa", "--questions", str(SAMPLE / "nq_test.jsonl"),
        "--passages", str(SAMPLE / "passages.jsonl"), "--objectives", "2",
        "--split", "test", "--output", str(out),
    )  # fmt: skip
    assert nq.returncode == 0, nq.stderr[-2000:]
    assert "reusing the index" in nq.stdout  # one corpus and index for both splits

    for split, n in (("train", 3), ("test", 2)):
        env = DocQAEnv(tasks=str(out), index=str(out / "index"), split=split)
        assert len(env.tasks) == n
        for index in range(n):
            _, info = env.reset(options={"task_index": index})
            assert info["max_turns"] == 6  # 2 questions: 2N + 2
            task = env.task
            obs, *_ = env.step(f"<think>start</think><search>{task.questions[0]}</search>")
            assert "Doc 1(Title: " in obs
            answer = "; ".join(a[0] for a in task.answers)
            _, reward, terminated, _, result = env.step(f"<answer>{answer}</answer>")
            assert terminated and reward == 2.0 and result["em"] == 2.0
    # an NQ question finds the passage holding its answer
    env = DocQAEnv(tasks=str(out), index=str(out / "index"), split="test")
    env.reset(options={"task_index": 0})
    for question, answers in zip(env.task.questions, env.task.answers, strict=True):
        env.reset(options={"task_index": 0})
        obs, *_ = env.step(f"<search>{question}</search>")
        assert any(a in obs for a in answers), (question, obs)


def test_answer_forms_and_malformed_records(tmp_path):
    path = tmp_path / "mixed.jsonl"
    lines = [
        {"question": "q1", "golden_answers": ["a", "b"]},  # FlashRAG
        {"question": "q2", "answer": ["c"]},  # NQ-open
        {"question": "q3; more", "answer": "d;e"},  # HotpotQA, with the task separator
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    items = read_questions(path)
    assert [i.answers for i in items] == [("a", "b"), ("c",), ("d,e",)]
    assert items[2].question == "q3, more"
    listed = tmp_path / "hotpot.json"
    listed.write_text(json.dumps([{"_id": "x", "question": "q", "answer": "a"}]))
    assert read_questions(listed)[0].answers == ("a",)
    path.write_text(json.dumps({"question": "q"}) + "\n" + json.dumps(lines[0]) + "\n")
    with pytest.raises(ValueError, match=r"line 1: answers must be"):
        read_questions(path)
    assert len(read_questions(path, skip_malformed=True)) == 1
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_questions(tmp_path / "missing.jsonl")
