"""DocQAEnv's outcome figures of the last step: success, each question's EM, one value repeated
for every question, and the values a search found that the last internal state still holds."""

from __future__ import annotations

import pytest

from memrl.envs.doc_qa import DocQAEnv
from memrl.envs.doc_qa.agent import ScriptedAgent
from memrl.envs.doc_qa.env import ANSWER_REPEATS, EM_OF_QUESTION, VALUES_FOUND, VALUES_IN_STATE
from memrl.envs.doc_qa.scoring import question_matches, repeats_one_value, values_in_text
from memrl.envs.text import INFO_SUCCESS

CFG = dict(
    synthetic_passages=55, objectives=2, seed=0, topk=1, num_tasks=20, multi_hop_fraction=0.0,
    synthetic_redraw="facts",
)  # fmt: skip


def _task_with_two_different_answers(env: DocQAEnv) -> tuple[str, str]:
    for i in range(len(env.tasks)):
        env.reset(options={"task_index": i})
        a, b = (answers[0] for answers in env.task.answers)
        if a.lower() != b.lower():
            return a, b
    raise AssertionError("every task has one answer for both questions")


@pytest.mark.parametrize(
    ("answer", "em", "per_question", "success", "repeats"),
    [
        ("{a}; {b}", 2.0, [1.0, 1.0], 1.0, 0.0),
        ("{a}; {a}", 1.0, [1.0, 0.0], 0.0, 1.0),  # the guess: one value for both questions
        ("{b}; {a}", 0.0, [0.0, 0.0], 0.0, 0.0),
        ("{a}", 0.0, [0.0, 0.0], 0.0, 0.0),  # wrong number of parts
    ],
)
def test_answer_outcome_per_question(answer, em, per_question, success, repeats):
    env = DocQAEnv(**CFG)
    a, b = _task_with_two_different_answers(env)
    _, reward, terminated, _, info = env.step(f"<answer>{answer.format(a=a, b=b)}</answer>")
    assert terminated and reward == em == info["em"]
    assert [info[f"{EM_OF_QUESTION}{k}"] for k in (1, 2)] == per_question
    assert info[INFO_SUCCESS] == success and info[ANSWER_REPEATS] == repeats


def test_scoring_helpers_by_hand():
    targets = [["Paris"], ["1889", "eighteen eighty-nine"]]
    assert question_matches("paris; 1889", targets) == [1.0, 1.0]
    assert question_matches("Paris; 1890", targets) == [1.0, 0.0]
    assert question_matches("Paris", targets) == [0.0, 0.0]
    assert repeats_one_value("The Paris; paris.") and not repeats_one_value("Paris")
    assert not repeats_one_value("Paris; Rome")
    assert values_in_text(["1931", "Ada Lovelace"], "founded in 1931 by ada lovelace.") == [
        True,
        True,
    ]
    assert values_in_text(["1931"], "founded in 19310") == [False]


def test_state_recall_counts_found_values_kept_in_the_last_state():
    env = DocQAEnv(**CFG)
    agent = ScriptedAgent(env.tags)
    obs, info = env.reset(options={"task_index": 0})
    agent.reset(obs, info)
    # Before any search nothing is found.
    assert env._info(format_error=False, answered=False)[VALUES_FOUND] == 0.0
    done, observation = False, None
    while not done:
        action = agent.act(observation)
        observation, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    # The scripted reader finds both values and keeps both in its last state.
    assert info["em"] == 2.0 and info[VALUES_FOUND] == 2.0 and info[VALUES_IN_STATE] == 2.0

    # The same searches, then an answer whose state dropped what was found.
    obs, info = env.reset(options={"task_index": 0})
    agent.reset(obs, info)
    first = agent.act(None)
    assert "<search>" in first
    observation, *_ = env.step(first)
    a, b = (answers[0] for answers in env.task.answers)
    _, _, _, _, info = env.step(
        f"<{env.tags.state}>nothing kept</{env.tags.state}><answer>{a}; {b}</answer>"
    )
    assert info[VALUES_FOUND] >= 1.0 and info[VALUES_IN_STATE] == 0.0
    assert info[INFO_SUCCESS] == 1.0  # right answers, yet the state holds none of them
