"""The multi-turn rollout loop on the real doc-QA env: records, contexts and memory metrics."""

import pytest

from memrl.bench.mem1_context import ScriptedBackend
from memrl.envs import make_env
from memrl.methods.mem1.context import ContextPolicy, context_ids
from memrl.methods.mem1.generation import GenerationSettings, make_backend
from memrl.methods.mem1.prompts import PromptSettings, render_prompt
from memrl.methods.mem1.rollout import find_scratch, rollout
from memrl.methods.mem1.tiny import TinyModelSettings, build_tiny_model, build_tokenizer, env_texts
from memrl.metrics import TurnTokens, dependency, peak_tokens, turn_dependency

ENV = {"synthetic_passages": 60, "objectives": 2, "seed": 0, "num_tasks": 20}
PROMPT = PromptSettings()


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(
        env_texts("memrl/DocQA-v0", ENV, PROMPT, 20), 800, PROMPT.all_tag_strings()
    )


def _scripted_rollout(tokenizer, policy_name, n=3, env=None):
    envs = [make_env("memrl/DocQA-v0", env or ENV) for _ in range(n)]
    backend = ScriptedBackend(tokenizer, PROMPT, max_turns=6)
    prompts, questions = [], []
    for i, env in enumerate(envs):
        obs, info = env.reset(options={"task_index": i})
        prompts.append(tokenizer.encode(render_prompt(PROMPT, obs, tokenizer)))
        questions.append(info["task"]["questions"])
    backend.begin(prompts, questions)
    return rollout(
        envs,
        backend,
        tokenizer,
        policy=ContextPolicy(policy_name),
        prompt=PROMPT,
        max_tokens_per_turn=128,
        reset_options=[{"task_index": i} for i in range(n)],
    )


def test_episodes_record_exact_contexts_and_memory(tokenizer):
    episodes = _scripted_rollout(tokenizer, "mem1")
    for ep in episodes:
        assert ep.info["em"] == 2.0 and ep.env_reward == 2.0 and ep.format_errors == 0
        assert len(ep.turns) >= 3 and not ep.turns[-1].obs_ids
        for j, (turn, counts) in enumerate(zip(ep.turns, ep.turn_tokens, strict=True)):
            ctx = context_ids(ContextPolicy("mem1"), ep.prompt_ids, ep.turns, j)
            assert counts == TurnTokens(context=len(ctx), generated=len(turn.gen_ids))
        mem = ep.memory_metrics()
        assert mem["peak_tokens"] == max(c.context + c.generated for c in ep.turn_tokens)
        assert mem["dependency"] == sum(
            turn_dependency(c.context, c.generated) for c in ep.turn_tokens
        )


def test_mem1_needs_less_memory_than_full_for_the_same_actions(tokenizer):
    mem1 = _scripted_rollout(tokenizer, "mem1")
    full = _scripted_rollout(tokenizer, "full")
    for a, b in zip(mem1, full, strict=True):
        assert [t.gen_ids for t in a.turns] == [t.gen_ids for t in b.turns]
        assert a.memory_metrics()["peak_tokens"] < b.memory_metrics()["peak_tokens"]
        assert a.memory_metrics()["dependency"] < b.memory_metrics()["dependency"]


def test_model_rollout_records_logps_and_groups(tokenizer):
    lm = build_tiny_model(len(tokenizer), TinyModelSettings(hidden_size=32, intermediate_size=64))
    backend = make_backend(GenerationSettings(seed=3), lm, tokenizer)
    envs = [make_env("memrl/DocQA-v0", ENV) for _ in range(4)]
    episodes = rollout(
        envs,
        backend,
        tokenizer,
        policy=ContextPolicy("mem1"),
        prompt=PROMPT,
        max_tokens_per_turn=6,
        reset_options=[{"task_index": 5}] * 2 + [{"task_index": 6}] * 2,
        group_ids=["a", "a", "b", "b"],
    )
    assert [ep.group_id for ep in episodes] == ["a", "a", "b", "b"]
    assert episodes[0].task_id == episodes[1].task_id != episodes[2].task_id
    for ep in episodes:
        for turn in ep.turns:
            assert 1 <= len(turn.gen_ids) <= 6 and len(turn.logps) == len(turn.gen_ids)
            assert all(lp <= 0 for lp in turn.logps)
        # A random model writes no action tag: the env ends the episode as a format error.
        assert ep.format_errors == len(ep.turns) == 1 and ep.env_reward == 0.0


def test_metric_formulas():
    turns = [TurnTokens(10, 3), TurnTokens(20, 2)]
    assert turn_dependency(10, 3) == 11 + 12 + 13
    assert dependency(turns) == 36 + 21 + 22 and peak_tokens(turns) == 22
    with pytest.raises(ValueError):
        turn_dependency(-1, 2)


def test_find_scratch_spans_the_think_block(tokenizer):
    ids = tokenizer.encode("<think>plan it</think><summary>x</summary><answer>search[a]</answer>")
    a, b = find_scratch(tokenizer, ids, "think")
    assert tokenizer.decode(ids[a:b]) == "<think>plan it</think>"
    assert find_scratch(tokenizer, tokenizer.encode("<answer>x</answer>"), "think") is None


class _CountingRetriever:
    """A real in-process index that records the size of every batch of queries it answers."""

    def __init__(self, inner):
        self.inner = inner
        self.batches: list[int] = []

    def retrieve(self, queries, topk):
        self.batches.append(len(queries))
        return self.inner.retrieve(queries, topk)


def test_envs_that_search_share_one_request_per_turn(tokenizer):
    from memrl.envs.doc_qa import resources
    from memrl.envs.retrieval.app import RetrievalServer

    counting = _CountingRetriever(resources.synthetic_retriever(60, 0))
    with RetrievalServer(counting) as server:
        env = {**ENV, "retriever": "http", "retrieval_url": server.url}
        episodes = _scripted_rollout(tokenizer, "mem1", n=4, env=env)
    searches = sum(int(ep.info["num_searches"]) for ep in episodes)
    turns_with_search = max(len(ep.turns) for ep in episodes) - 1  # every turn but the answer
    assert all(ep.info["em"] == 2.0 for ep in episodes)  # same outcome as the local index
    assert sum(counting.batches) == searches > len(counting.batches)
    assert len(counting.batches) <= turns_with_search  # one POST /retrieve per turn at most
    assert max(counting.batches) == 4  # all four envs searched together
