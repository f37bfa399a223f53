"""DocQAEnv's batched-search hooks (``search_request`` / ``prefetch``) and its turn limit derived
from the number of questions."""

from __future__ import annotations

import pytest

from memrl.envs.doc_qa.env import DocQAEnv, turn_limit


class _Recording:
    """A real in-process index that records every batch of queries it answers."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[list[str]] = []

    def retrieve(self, queries, topk):
        self.calls.append(list(queries))
        return self.inner.retrieve(queries, topk)


def test_search_request_names_the_query_and_prefetched_hits_spare_the_retriever():
    env = DocQAEnv(synthetic_passages=60, num_tasks=10)
    env.reset(options={"task_index": 0})
    env.retriever = recording = _Recording(env.retriever)
    assert env.search_request("<think>x</think><answer>a; b</answer>") is None
    assert env.search_request("no tags at all") is None
    assert env.search_request("<search>   </search>") is None
    request = env.search_request("<think>plan</think><search>  Poserno   population </search>")
    assert request.query == "Poserno population" and request.topk == 3
    assert request.retriever is recording and request.key == ("local", id(recording))
    hits = request.retriever.retrieve([request.query], request.topk)[0]
    env.prefetch(request.query, hits)
    obs, *_ = env.step("<search>Poserno population</search>")
    assert len(recording.calls) == 1  # the step used the prefetched hits
    assert hits[0].title in obs
    env.step("<search>Poserno population</search>")  # nothing prefetched: the env searches
    assert len(recording.calls) == 2


def test_http_envs_of_one_server_share_a_key():
    a = DocQAEnv(synthetic_passages=60, retriever="http", retrieval_url="http://127.0.0.1:9")
    b = DocQAEnv(synthetic_passages=60, retriever="http", retrieval_url="http://127.0.0.1:9")
    for env in (a, b):
        env.reset(options={"task_index": 0})
    assert a.search_request("<search>q</search>").key == b.search_request("<search>q</search>").key


@pytest.mark.parametrize(
    ("objectives", "max_turns", "want"), [(3, None, 8), (2, None, 6), (3, 4, 4)]
)
def test_turn_limit_follows_the_number_of_questions_unless_set(objectives, max_turns, want):
    assert turn_limit(max_turns, objectives) == want
    env = DocQAEnv(synthetic_passages=60, objectives=objectives, max_turns=max_turns)
    _, info = env.reset(options={"task_index": 0})
    assert info["max_turns"] == want
    truncated = False
    for _ in range(want):
        _, _, terminated, truncated, _ = env.step("<search>anything</search>")
        assert not terminated
    assert truncated
