"""Property tests of every text env: any action, up to 1 MB, is a step without an exception.

Each example resets the env, takes a few ordinary steps drawn by Hypothesis to reach a page
(WebShop) or a state, then one drawn action: tag soup, adversarial repetitions (the inputs that
made the old regex parsers quadratic), lone surrogates, non-strings. The deadline is the only
timing bound: an example (reset and steps) must finish within 100 ms. Observations must stay
short whatever the action's size. WebSearchQA runs from a replay cache, so no step touches the
network.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memrl.envs.doc_qa import DocQAEnv
from memrl.envs.web_search import WebSearchQAEnv
from memrl.envs.web_search.cache import WebCache
from memrl.envs.web_search.config import CacheConfig
from memrl.envs.webshop import WebShopEnv

MAX_ACTION = 1_000_000
MAX_OBSERVATION = 8_000
"""No observation may be longer, whatever the action (the longest pages are ~2k characters)."""

_FRAGMENTS = [
    "<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>", "<open>", "</open>",
    "<summary>", "</summary>", "<information>", "search[", "click[", "[", "]", "x", " ", "\n",
    "buy now", "next >", "1", "http://", "https://127.0.0.1:1/", "http://[::1]/", "file:///etc",
    "\ud800", "\udfff", "\ud83d", "日本", "’", "é", "\x00", "\r\n", ";", "%", "{", "\\",
]  # fmt: skip

_piece = st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=6)), max_size=10).map(
    "".join
)


def _repeat(head: str, unit: str, count: int, tail: str) -> str:
    count = min(count, (MAX_ACTION - len(head) - len(tail)) // max(1, len(unit)))
    return head + unit * count + tail


_repeated = st.builds(
    _repeat,
    _piece,
    _piece.filter(bool),
    st.one_of(st.sampled_from([16_000, 60_000, 65_536, MAX_ACTION]), st.integers(1, MAX_ACTION)),
    _piece,
)
_strings = st.one_of(_piece, _repeated)
_actions = st.one_of(
    _strings,
    st.builds(lambda a, t, b: f"{a}<{t}>{b}</{t}>", _piece, st.sampled_from(["search", "answer",
              "open"]), _strings),
    st.none(),
    st.integers(),
    st.binary(max_size=20),
)  # fmt: skip

FUZZ = settings(
    max_examples=150,
    deadline=timedelta(milliseconds=100),
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _check(step_result) -> None:
    obs, reward, terminated, truncated, info = step_result
    assert isinstance(obs, str) and len(obs) <= MAX_OBSERVATION, len(obs)
    assert isinstance(reward, float) and isinstance(info["format_error"], bool)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    obs.encode("utf-8")  # no lone surrogate reaches an observation


# --- DocQA -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docqa():
    env = DocQAEnv(synthetic_passages=200, num_tasks=10, end_on_format_error=False)
    env.reset(seed=0)
    env.step("<search>warm up</search>")
    return env


@FUZZ
@given(st.lists(st.sampled_from(["<search>capital</search>", "no tags"]), max_size=2), _actions)
def test_docqa_any_action(docqa, prefix, action):
    docqa.reset(seed=0)
    for step in prefix:
        docqa.step(step)
    _check(docqa.step(action))


# --- WebShop -----------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["mem1", "raw"])
def webshop(request):
    env = WebShopEnv(num_products=300, split="all", action_format=request.param)
    env.reset(seed=0)
    return env


def _mem1(page_action: str) -> str:
    return f"<think>t</think><summary>s</summary><answer>{page_action}</answer>"


_page_actions = st.one_of(
    _actions,
    st.builds(lambda kind, arg: f"{kind}[{arg}]", st.sampled_from(["search", "click"]), _strings),
)


@FUZZ
@given(st.integers(0, 3), _page_actions, st.booleans())
def test_webshop_any_action(webshop, depth, action, wrap):
    webshop.reset(options={"task_index": 0})
    # Reach the search page, the results, an item page or a sub-page before the drawn action.
    for _ in range(depth):
        clickables = webshop.available_actions()["clickables"]
        if webshop.available_actions()["has_search_bar"]:
            plan = "search[shampoo]"
        else:
            targets = [c for c in clickables if c.startswith("b0")] or ["description"]
            plan = f"click[{targets[0]}]"
        webshop.step(_mem1(plan) if webshop.action_format == "mem1" else plan)
    if wrap and webshop.action_format == "mem1" and isinstance(action, str):
        action = _mem1(action)
    _check(webshop.step(action))


# --- WebSearchQA -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def websearch(tmp_path_factory):
    cache = tmp_path_factory.mktemp("replay")
    WebCache(CacheConfig(mode="readwrite", path=str(cache))).close()
    env = WebSearchQAEnv(
        tasks=[{"questions": ["What is x?"], "answers": [["x"]]}],
        cache={"mode": "replay", "path": str(cache)},
    )
    yield env
    env.close()


_open_targets = st.one_of(
    _strings,
    st.builds(lambda a: f"http://{a}", _strings),
    st.builds(lambda a: f"https://example.org/{a}", _strings),
)


@FUZZ
@given(
    st.lists(st.sampled_from(["<search>x</search>", "<open>1</open>"]), max_size=2),
    st.one_of(_actions, st.builds(lambda t: f"<open>{t}</open>", _open_targets)),
)
def test_websearch_any_action(websearch, prefix, action):
    websearch.reset(options={"task_index": 0})
    for step in prefix:
        websearch.step(step)
    _check(websearch.step(action))


# --- The cases behind the properties, spelled out ----------------------------------------------


def test_overlong_actions_are_refused_with_a_clear_observation(docqa, websearch):
    action = "<think>plan</think><search>capital</search>" + "x" * 70_000
    docqa.reset(seed=0)
    obs, _, _, _, info = docqa.step(action)
    assert "it has 70043 characters; at most 65536 are allowed" in obs and info["format_error"]
    websearch.reset(options={"task_index": 0})
    obs, _, terminated, _, info = websearch.step(action)
    assert "at most 65536 are allowed" in obs and terminated and info["format_error"]
    for action_format in ("mem1", "raw"):
        env = WebShopEnv(num_products=300, split="all", action_format=action_format)
        env.reset(seed=0)
        obs, reward, terminated, _, info = env.step("search[shampoo]" + " " * 70_000)
        assert "at most 65536 are allowed" in info["message"] and not info["valid"]
        assert terminated is (action_format == "mem1")


def test_echoes_of_huge_arguments_are_cut():
    env = WebShopEnv(num_products=300, split="all", max_action_chars=2_000_000)
    env.reset(seed=0)
    obs, *_ = env.step(_mem1("click[" + "a" * 1_000_000 + "]"))
    assert "Invalid action: click[" + "a" * 200 + "... [999800 more characters]] is not" in obs
    assert len(obs) < 2_000


def test_huge_urls_are_not_echoed_whole(tmp_path):
    WebCache(CacheConfig(mode="readwrite", path=str(tmp_path))).close()
    env = WebSearchQAEnv(
        tasks=[{"questions": ["q?"], "answers": [["a"]]}],
        cache={"mode": "replay", "path": str(tmp_path)},
        max_action_chars=2_000_000,
    )
    try:
        env.reset(seed=0)
        for url in ("http://" + "a" * 1_000_000, "http://[::1]/" + "b" * 1_000_000):
            obs, *_ = env.step(f"<open>{url}</open>")
            assert "more characters]" in obs and len(obs) < 2_000, obs[:300]
    finally:
        env.close()


def test_non_strings_and_lone_surrogates_are_actions_like_any(websearch, webshop):
    websearch.reset(seed=0)
    obs, *_ = websearch.step("<search>caf\udce9 \ud800</search>")
    assert "not in the replay cache" in obs
    obs, *_ = websearch.step("<open>http://example.org/\udfff</open>")
    assert "not in the replay cache" in obs
    obs, *_ = websearch.step("<open>http://[x]/</open>")
    assert "denied: URL 'http://[x]/' is malformed" in obs
    for action in (None, 12, b"click[x]", ["a"]):
        webshop.reset(seed=0)
        assert isinstance(webshop.step(action)[0], str)
