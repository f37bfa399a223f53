"""``memrl/WebSearchQA-v0`` end to end with the real browser against the local site."""

from __future__ import annotations

import dataclasses
import os
import signal

import pandas as pd
import pytest
from websearch_helpers import FAST_FETCH, WITH_DENIED_TARGETS

from memrl.envs import make_env
from memrl.envs.web_search import WebSearchQAEnv
from memrl.envs.web_search.testsite import LocalSite

THINK = "<think>I know nothing yet.</think>"


def env_config(site: LocalSite, cache_dir, **overrides):
    config = {
        "tasks": LocalSite.tasks(),
        "safety": dataclasses.asdict(WITH_DENIED_TARGETS),
        "fetch": {**dataclasses.asdict(FAST_FETCH), "max_page_tokens": 20, "max_links": 3},
        "cache": {"mode": "readwrite", "path": str(cache_dir)},
        "search": {"backend": "html", "options": site.search_options()},
    }
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("webcache")


@pytest.fixture(scope="module")
def env(site, cache_dir):
    env = make_env("memrl/WebSearchQA-v0", env_config(site, cache_dir))
    yield env
    env.close()


def test_registered_entry_point_builds_the_env(env):
    assert isinstance(env.unwrapped, WebSearchQAEnv)


def test_full_episode_search_open_answer(env, site):
    obs, info = env.reset(options={"task_index": 0})
    assert obs == "What is the capital of Zorbania?"
    assert info["task_id"] == "local-0" and info["max_turns"] == 6
    assert info["task"] == {"questions": ["What is the capital of Zorbania?"]}

    obs, reward, term, trunc, info = env.step(THINK + "<search>capital of Zorbania</search>")
    assert obs.startswith("<information>[HINT]You have 5 turns left.[/HINT]")
    assert obs.endswith("</information>")
    assert f"Result 1(Title: Zorbania - facts) URL: {site.url}/page/zorbania" in obs
    assert (reward, term, trunc, info["num_searches"]) == (0.0, False, False, 1)

    obs, *_ = env.step("<think>Result 1 looks right.</think><open>1</open>")
    assert "Page(Title: Zorbania - facts)" in obs and "capital of Zorbania is Quillton" in obs
    assert "[Truncated: 20 of" in obs  # the token budget
    assert "Link 1(Title: River Mell)" in obs

    obs, reward, term, trunc, info = env.step("<think>Quillton.</think><answer>Quillton</answer>")
    assert (reward, term, trunc) == (1.0, True, False)
    assert info["em"] == 1.0 and info["f1"] == 1.0 and not info["format_error"]


def test_two_questions_with_javascript_page_and_link_numbers(env, site):
    env.reset(options={"task_index": 1})
    obs, *_ = env.step(f"{THINK}<open>{site.url}/js</open>")
    assert "completed in 1874" in obs
    obs, *_ = env.step("<think>1874</think><search>Vornland national dish</search>")
    assert "Vornish cuisine" in obs
    obs, *_ = env.step("<think>1874</think><open>1</open>")
    assert "smoked plum stew" in obs
    _, reward, term, _, info = env.step("<answer>1874; Smoked plum stew</answer>")
    assert term and reward == 2.0 and info["f1"] == 2.0
    env.reset(options={"task_index": 1})
    _, reward, _, _, info = env.step("<answer>1874</answer>")  # wrong number of parts
    assert reward == 0.0 and info["em"] == 0.0


@pytest.mark.parametrize(
    "path, expected",
    [
        ("/missing", "answered HTTP 404; its page says:"),
        ("/redirect-private", "denied: host '10.255.255.1' resolves to private address"),
        ("/slow", "timed out"),
        ("/file.bin", "application/octet-stream"),
        ("/redirect-malformed", "could not load the page"),
    ],
)
def test_web_failures_become_observations(env, site, path, expected):
    env.reset(options={"task_index": 0})
    obs, reward, term, trunc, info = env.step(f"<open>{site.url}{path}</open>")
    assert expected in obs and obs.startswith("<information>[HINT]You have 5 turns left.")
    assert (reward, term, trunc) == (0.0, False, False)
    assert info["web_errors"] == 1


@pytest.mark.parametrize(
    "action, expected, ends",
    [
        ("I think the answer is Paris.", "No action found", True),
        ("<search>  </search>", "the search action was empty", False),
        ("<search>" + "x" * 400 + "</search>", "the limit is 300", False),
        ("<open>7</open>", "no item 7 in the last list (numbers: none (search first))", False),
        ("<open>not a url</open>", "open takes a number", False),
        ("<think><search>inside the state</search></think>", "No action found", True),
    ],
)
def test_malformed_actions_get_clear_observations(env, action, expected, ends):
    env.reset(options={"task_index": 0})
    obs, reward, term, _, info = env.step(action)
    assert expected in obs and reward == 0.0
    assert term is ends and info["format_error"]


def test_turn_limit_hints_and_truncation(env):
    env.reset(options={"task_index": 0})
    for _ in range(4):
        env.step("<open>x</open>")
    obs, *_ = env.step("<open>x</open>")
    assert "You have 1 turn left. You must give your final answer now" in obs
    obs, reward, term, trunc, _ = env.step("<open>x</open>")
    assert (reward, term, trunc) == (0.0, False, True)
    assert "episode is over" in env.step("<answer>x</answer>")[0]


def test_browser_killed_mid_episode_recovers(env, site):
    env.reset(options={"task_index": 0})
    env.step(f"<open>{site.url}/page/mell-river</open>")
    pool = env.unwrapped.client.pool
    os.kill(pool.browsers[0].chromium_pid(), signal.SIGKILL)
    obs, reward, term, trunc, info = env.step(f"<open>{site.url}/page/ada-brisk</open>")
    assert "Ada Brisk was an invented engineer" in obs
    assert info["browser_restarts"] >= 1 and not (term or trunc)


def test_replay_mode_reuses_the_cache_without_network(env, site, cache_dir):
    env.reset(options={"task_index": 0})
    env.step("<search>capital of Zorbania</search>")
    env.step("<open>1</open>")
    hits = sum(site.hits.values())
    replay = WebSearchQAEnv(
        **env_config(site, cache_dir, cache={"mode": "replay", "path": str(cache_dir)})
    )
    try:
        replay.reset(options={"task_index": 0})
        obs, *_, info = replay.step("<search>capital of Zorbania</search>")
        assert "Zorbania - facts" in obs and info["cache_hits"] == 1
        obs, *_, info = replay.step("<open>1</open>")
        assert "Quillton" in obs and info["cache_hits"] == 2
        obs, *_ = replay.step("<search>never asked before</search>")
        assert "not in the replay cache" in obs
        assert sum(site.hits.values()) == hits  # the site saw nothing
        assert replay.client._pool is None  # no browser was even started
    finally:
        replay.close()


def test_task_file_and_config_errors(site, cache_dir, tmp_path):
    path = tmp_path / "tasks.parquet"
    pd.DataFrame(LocalSite.tasks()).to_parquet(path)
    config = env_config(site, cache_dir, tasks=None, task_file=str(path))
    env = WebSearchQAEnv(**config)
    try:
        assert env.reset(options={"task_index": 1})[1]["task_id"] == "local-1"
    finally:
        env.close()
    with pytest.raises(ValueError, match=r"Unknown key\(s\) \['timeout'\] under fetch"):
        WebSearchQAEnv(**env_config(site, cache_dir, fetch={"timeout": 3}))
    with pytest.raises(ValueError, match="reward='bleu'"):
        WebSearchQAEnv(**env_config(site, cache_dir, reward="bleu"))
    with pytest.raises(ValueError, match="does not fit memrl/WebSearchQA-v0"):
        make_env("memrl/WebSearchQA-v0", {"colour": "red"})


def test_links_no_parser_accepts_are_left_out(env, site):
    env.reset(options={"task_index": 0})
    obs, reward, term, trunc, info = env.step(f"<open>{site.url}/bad-links</open>")
    assert "Links no parser accepts" in obs and not info["format_error"]
    assert obs.split("Links (")[1].count("Link ") == 1 and "Link 1(Title: Ada)" in obs


def test_a_lone_surrogate_on_a_page_reaches_the_agent_as_u_fffd(env, site):
    """chromedriver cannot serialize a lone surrogate: without care, the load fails and the
    browser is restarted on every visit of such a page."""
    env.reset(options={"task_index": 0})
    restarts = env.unwrapped.client.pool.restarts
    obs, *_, info = env.step(f"<open>{site.url}/lone-surrogate</open>")
    assert "A lone \ufffd surrogate in the text." in obs and info["web_errors"] == 0
    assert env.unwrapped.client.pool.restarts == restarts
