"""The scripted reference agent solves synthetic tasks through the env's text interface."""

from __future__ import annotations

import pytest

from memrl.envs.doc_qa import DocQAEnv
from memrl.envs.doc_qa.agent import ScriptedAgent, run_episode


def _success(env, episodes):
    results = [
        run_episode(env, ScriptedAgent(env.tags), options={"task_index": i})
        for i in range(episodes)
    ]
    objectives = len(env.tasks[0].questions)
    solved = sum(r["em"] == objectives for r in results) / episodes
    return solved, results


@pytest.mark.parametrize(
    ("passages", "objectives", "split", "max_turns"),
    [(300, 2, "train", 6), (300, 2, "test", 6), (10_000, 3, "test", 8)],
)
def test_agent_solves_most_tasks(passages, objectives, split, max_turns):
    env = DocQAEnv(
        synthetic_passages=passages,
        objectives=objectives,
        split=split,
        max_turns=max_turns,
        num_tasks=60,
    )
    solved, results = _success(env, 60)
    assert solved >= 0.9, solved
    for r in results:
        assert r["answered"] and not r["format_error"]
        assert r["turns"] == r["num_searches"] + 1 <= max_turns


def test_agent_answers_in_time_when_turns_run_short():
    # Two two-hop questions need four searches; with three turns the agent must answer early.
    env = DocQAEnv(
        synthetic_passages=300, objectives=2, max_turns=3, multi_hop_fraction=1.0, num_tasks=20
    )
    _, results = _success(env, 20)
    assert all(r["answered"] and r["turns"] <= 3 for r in results)
    assert all(r["em"] < 2 for r in results)


def test_agent_with_custom_tags():
    tags = {"state": "IS", "search": "query", "answer": "final", "information": "info"}
    env = DocQAEnv(synthetic_passages=300, tags=tags, num_tasks=10)
    solved, _ = _success(env, 10)
    assert solved >= 0.9
