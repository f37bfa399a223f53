"""DocQAEnv: the text protocol, observations, rewards, bad actions (property-tested)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrl.envs import make_env
from memrl.envs.doc_qa import DocQAEnv

SMALL = dict(synthetic_passages=300, objectives=2, split="train", seed=0, topk=3, max_turns=6)
DOC_LINE = re.compile(r"^Doc (\d)\(Title: [^)]+\) .+$", re.M)


@pytest.fixture
def env():
    return DocQAEnv(**SMALL)


def _gold(env) -> str:
    return "; ".join(a[0] for a in env.task.answers)


def test_registered_and_built_without_files():
    env = make_env("memrl/DocQA-v0", SMALL)
    obs, info = env.reset(seed=0)
    assert obs == "; ".join(info["task"]["questions"])
    assert info["max_turns"] == 6 and info["objectives"] == 2
    assert info["task_id"].startswith("synthetic300-s0-train-")
    with pytest.raises(ValueError, match="Allowed"):
        make_env("memrl/DocQA-v0", {**SMALL, "bogus": 1})


def test_reset_is_seeded_and_task_index_is_honoured(env):
    a = env.reset(seed=7)[1]["task_id"]
    b = env.reset(seed=7)[1]["task_id"]
    assert a == b
    info = env.reset(options={"task_index": 5})[1]
    assert info["task_id"] == env.tasks[5].task_id
    with pytest.raises(ValueError, match="out of range"):
        env.reset(options={"task_index": len(env.tasks)})


def test_search_observation_format_and_countdown(env):
    env.reset(seed=0)
    question = env.task.questions[0]
    for turn in range(1, 6):
        obs, reward, terminated, truncated, info = env.step(
            f"<think>turn {turn}</think>\n<search>{question}</search>"
        )
        left = 6 - turn
        assert obs.startswith("<information>[HINT]") and obs.endswith("</information>")
        if left > 1:
            assert f"[HINT]You have {left} turns left.[/HINT]" in obs
        else:
            assert "You have 1 turn left. You must answer the question in the next turn." in obs
        assert [int(n) for n in DOC_LINE.findall(obs)] == [1, 2, 3]
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert info["num_searches"] == turn and info["format_error"] is False
    obs, reward, terminated, truncated, info = env.step("<search>more</search>")
    assert truncated and not terminated and reward == 0.0 and not info["answered"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>x</answer>")


def test_answer_scores_summed_em_and_reports_f1(env):
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step(
        f"<think>done</think><answer>{_gold(env)}</answer>"
    )
    assert (reward, terminated, truncated) == (2.0, True, False)
    assert info["em"] == 2.0 and info["f1"] == 2.0 and info["answered"]
    env.reset(seed=1)
    first = env.task.answers[0][0]
    _, reward, _, _, info = env.step(f"<answer>{first}; certainly wrong</answer>")
    assert reward == 1.0 and info["em"] == 1.0
    env.reset(seed=1)
    _, reward, _, _, info = env.step(f"<answer>{first}</answer>")  # one part for two questions
    assert reward == 0.0 and info["answer_parts"] == 1


def test_f1_reward_mode():
    env = DocQAEnv(**SMALL, reward="f1")
    env.reset(seed=1)
    gold = env.task.answers
    _, reward, _, _, info = env.step(f"<answer>{gold[0][0]} extra; {gold[1][0]}</answer>")
    assert info["em"] == 1.0
    assert reward == pytest.approx(info["f1"]) and 1.0 < reward < 2.0


def test_no_tag_ends_episode_by_default_or_continues(env):
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("I think the answer is Paris.")
    assert terminated and reward == 0.0 and info["format_error"]
    assert "no <search>query</search>" in obs and "reward 0" in obs
    lenient = DocQAEnv(**SMALL, end_on_format_error=False)
    lenient.reset(seed=0)
    obs, reward, terminated, truncated, info = lenient.step("no tags here")
    assert not terminated and not truncated and info["num_format_errors"] == 1
    assert "[HINT]You have 5 turns left.[/HINT]" in obs and "Invalid response" in obs


def test_empty_and_huge_queries_get_explained(env):
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step("<search>   </search>")
    assert "query inside <search></search> is empty" in obs and info["format_error"]
    assert not terminated and info["num_searches"] == 0
    obs, _, _, _, info = env.step("<search>" + "word " * 10_000 + "</search>")
    assert "at most 512 are allowed" in obs and info["num_format_errors"] == 2


def test_first_action_counts_and_state_block_is_ignored(env):
    env.reset(seed=2)
    gold = _gold(env)
    action = (
        "<think>maybe <answer>wrong; wrong</answer> or <search>x</search></think>"
        f"<answer>{gold}</answer><search>after</search><answer>late; late</answer>"
    )
    _, reward, terminated, _, _ = env.step(action)
    assert reward == 2.0 and terminated


def test_custom_tags_and_validation():
    env = DocQAEnv(**SMALL, tags={"state": "IS", "search": "query", "information": "info"})
    env.reset(seed=0)
    obs, *_ = env.step("<IS>s</IS><query>anything at all</query>")
    assert obs.startswith("<info>[HINT]") and obs.endswith("</info>")
    _, _, terminated, _, info = env.step("<search>old tag</search>")
    assert terminated and info["format_error"]
    with pytest.raises(ValueError, match="Unknown tag"):
        DocQAEnv(**SMALL, tags={"thought": "x"})
    with pytest.raises(ValueError, match="differ"):
        DocQAEnv(**SMALL, tags={"search": "answer"})
    with pytest.raises(ValueError, match="retrieval_url"):
        DocQAEnv(**SMALL, retriever="http")


def test_observation_is_capped():
    env = DocQAEnv(**SMALL, max_info_chars=90)
    env.reset(seed=0)
    obs, *_ = env.step(f"<search>{env.task.questions[0]}</search>")
    assert obs.count(" ...") == 3


def test_wikipedia_length_passages_are_retrieved_and_still_answerable():
    from memrl.envs.doc_qa.agent import ScriptedAgent, run_episode

    env = DocQAEnv(**{**SMALL, "synthetic_passages": 110}, synthetic_passage_words=100)
    env.reset(seed=0)
    obs, *_ = env.step(f"<search>{env.task.questions[0]}</search>")
    docs = [line for line in obs.splitlines() if DOC_LINE.match(line)]
    assert len(docs) == 3
    for line in docs:
        assert len(line.split(") ", 1)[1].split()) == 100
    for i in range(5):  # the padding neither hides nor changes a fact
        result = run_episode(env, ScriptedAgent(env.tags), options={"task_index": i})
        assert result["reward"] == 2.0
    with pytest.raises(ValueError, match="synthetic_passage_words must be an int >= 0"):
        DocQAEnv(**SMALL, synthetic_passage_words=-5)


def test_facts_redrawn_per_task_are_answerable_only_from_that_tasks_passages():
    from memrl.envs.doc_qa.agent import ScriptedAgent, run_episode

    cfg = {**SMALL, "synthetic_passages": 55, "multi_hop_fraction": 0.0, "num_tasks": 40}
    fixed = DocQAEnv(**cfg)
    env = DocQAEnv(**cfg, synthetic_redraw="facts")
    # Same names and question wording, new values: over 40 tasks, most gold answers change, and
    # a question asked by two tasks has different answers in them.
    changed = sum(a.answers != b.answers for a, b in zip(fixed.tasks, env.tasks, strict=True))
    assert changed > 30
    by_question: dict[str, set] = {}
    for task in env.tasks:
        for q, a in zip(task.questions, task.answers, strict=True):
            by_question.setdefault(q, set()).add(a[0])
    assert any(len(values) > 1 for values in by_question.values())
    # The scripted reader solves every task against that task's own passages ...
    for i in range(10):
        assert run_episode(env, ScriptedAgent(env.tags), options={"task_index": i})["reward"] == 2
    # ... and the answers of the world's fixed facts are wrong for most tasks (one-hop tasks ask
    # the same questions in both: only the values moved).
    wrong = 0
    for i in range(10):
        env.reset(options={"task_index": i})
        assert env.task.questions == fixed.tasks[i].questions
        answer = "; ".join(a[0] for a in fixed.tasks[i].answers)
        _, reward, *_ = env.step(f"<answer>{answer}</answer>")
        wrong += reward < 2
    assert wrong >= 5
    # A test task's world is never a train task's world.
    test_env = DocQAEnv(**{**cfg, "split": "test"}, synthetic_redraw="facts")
    test_env.reset(options={"task_index": 0})
    env.reset(options={"task_index": 0})
    assert test_env.retriever is not env.retriever


def test_a_world_per_task_has_its_own_names_and_stays_solvable():
    from memrl.envs.doc_qa.agent import ScriptedAgent, run_episode

    cfg = {**SMALL, "synthetic_passages": 55, "num_tasks": 30}
    env = DocQAEnv(**cfg, synthetic_redraw="world")
    names = set()
    for i in range(30):
        env.reset(options={"task_index": i})
        titles = set(env.retriever.corpus.table.column("title").to_pylist())
        assert len(titles) == 30  # 20 people, 4 cities, 5 organizations, 1 country
        names |= titles
        # every question names an entity of this task's world (one- and two-hop alike)
        for q in env.task.questions:
            assert any(title in q for title in titles), q
    assert len(names) > 25 * 30  # worlds (almost) never share a name
    for i in range(8):
        result = run_episode(env, ScriptedAgent(env.tags), options={"task_index": i})
        assert result["reward"] == 2.0
    # Rebuilt the same in another process-equivalent: the cache cleared, same world again.
    first = env.tasks[0]
    from memrl.envs.doc_qa import resources

    resources.clear()
    assert DocQAEnv(**cfg, synthetic_redraw="world").tasks[0] == first


def test_redraw_needs_the_in_process_synthetic_kb():
    cfg = {**SMALL, "synthetic_passages": 55}
    with pytest.raises(ValueError, match="synthetic_redraw must be one of"):
        DocQAEnv(**cfg, synthetic_redraw="names")
    with pytest.raises(ValueError, match="synthetic_redraw='world' .* retriever='local'"):
        DocQAEnv(**cfg, synthetic_redraw="world", retriever="http",
                 retrieval_url="http://127.0.0.1:1")  # fmt: skip


_tricky = st.one_of(
    st.text(max_size=300),
    st.builds(lambda a, b: f"<search>{a}</search>{b}", st.text(max_size=200), st.text(max_size=50)),
    st.builds(lambda a: f"<answer>{a}</answer>", st.text(max_size=200)),
    st.builds(lambda a: f"<think>{a}", st.text(max_size=100)),
    st.sampled_from(
        [
            "<search>",
            "</search>",
            "<answer></answer>",
            "<search><answer>x</answer>",
            "<SEARCH>x</SEARCH>",
            "<search>日本の首都</search>",
            "\x00<search>\x00</search>",
            "<answer>;;;;</answer>",
            "<search>" + "x" * 5000 + "</search>",
        ]
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_tricky, min_size=1, max_size=8))
def test_any_string_is_a_legal_action(actions):
    env = DocQAEnv(**SMALL, end_on_format_error=False)
    env.reset(seed=0)
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and isinstance(reward, float)
        assert 0.0 <= reward <= 2.0
        assert {"em", "f1", "num_searches", "format_error", "task_id"} <= set(info)
        if terminated or truncated:
            break
        assert obs.startswith("<information>[HINT]")


def test_batched_search_requests_hold_only_what_step_would_search():
    """The request a caller fetches ahead of ``step`` (``search_request``) is what ``step`` would
    search: none for an action over the cap (step refuses it unparsed), and a query with lone
    surrogates as U+FFFD (no retriever, HTTP or tokenizer, is handed an ill-formed string)."""
    env = DocQAEnv(**SMALL, max_action_chars=200)
    env.reset(seed=0)
    assert env.search_request("<search>" + "x " * 150 + "</search>") is None
    request = env.search_request("<search>capital \ud800 of \udfff</search>")
    assert request is not None and request.query == "capital \ufffd of \ufffd"
    env.prefetch(request.query, [])
    obs, *_, info = env.step("<search>capital \ud800 of \udfff</search>")
    assert info["num_searches"] == 1 and "Doc 1(" not in obs  # the prefetched (empty) hits
