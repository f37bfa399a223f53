"""Extraction, cache, tasks and search backends (no browser)."""

from __future__ import annotations

import pandas as pd
import pytest
from websearch_helpers import LOCAL_ONLY

from memrl.envs.web_search.api_client import HttpClient
from memrl.envs.web_search.backends import (
    PRESETS,
    HtmlBackend,
    SearchFailed,
    build_backend,
    parse_results,
)
from memrl.envs.web_search.cache import WebCache
from memrl.envs.web_search.config import CacheConfig, SearchConfig, from_dict
from memrl.envs.web_search.extract import extract, is_text_type, truncate_tokens
from memrl.envs.web_search.policy import UrlPolicy
from memrl.envs.web_search.tasks import load_tasks

PAGE = """<html><head><title> The  Title </title><style>.x{color:red}</style>
<script>var secret = 'script text';</script></head><body>
<header>Site header</header><nav><a href="/nav">Nav link</a></nav>
<div role="navigation">Menu item</div>
<main><h1>Heading</h1><p>First <b>bold</b> paragraph with <a href="/rel#frag">a link</a>.</p>
<p hidden>hidden text</p><div aria-hidden="true">aria hidden</div>
<ul><li>item one</li><li>item two <a href="https://other.example/x">other</a></li></ul>
<a href="mailto:a@b.c">mail</a><a href="/rel">dup</a></main>
<footer>Footer text</footer></body></html>"""


def test_extract_keeps_main_text_title_and_links():
    title, text, links = extract(PAGE, "http://site.example/dir/page")
    assert title == "The Title"
    assert text.splitlines() == [
        "Heading",
        "First bold paragraph with a link.",
        "item one",
        "item two other",
        "maildup",
    ]
    for gone in (
        "script text",
        "color",
        "Site header",
        "Nav link",
        "Menu item",
        "Footer",
        "hidden",
    ):
        assert gone not in text
    assert links == [("a link", "http://site.example/rel"), ("other", "https://other.example/x")]


def test_extract_falls_back_to_body_when_main_is_a_sliver():
    html = "<body><main>tiny</main><div>" + "long body text " * 50 + "</div></body>"
    _, text, _ = extract(html, "http://x.example/")
    assert "long body text" in text and "tiny" in text


def test_truncate_tokens_counts_whitespace_tokens():
    text = "one two three\nfour five\nsix"
    assert truncate_tokens(text, 10) == (text, 6)
    assert truncate_tokens(text, 4) == ("one two three\nfour", 6)


@pytest.mark.parametrize(
    "kind, ok",
    [
        ("text/html", True),
        ("text/plain; charset=utf-8", True),
        ("application/json", True),
        ("image/svg+xml", True),
        ("application/pdf", False),
        ("application/octet-stream", False),
    ],
)
def test_text_types(kind, ok):
    assert is_text_type(kind) is ok


def test_cache_is_content_addressed_and_replays(tmp_path):
    cache = WebCache(CacheConfig(path=str(tmp_path)))
    cache.put({"kind": "page", "url": "http://a/"}, {"text": "same"})
    cache.put({"kind": "page", "url": "http://b/"}, {"text": "same"})
    assert len(cache) == 2
    assert len(list((tmp_path / "blobs").rglob("*"))) == 2  # one shard dir + one blob
    assert cache.get({"kind": "page", "url": "http://a/"}) == {"text": "same"}
    assert cache.get({"kind": "page", "url": "http://c/"}) is None
    assert (cache.hits, cache.misses) == (1, 1)
    cache.close()
    replay = WebCache(CacheConfig(path=str(tmp_path), mode="replay"))
    assert replay.offline
    assert replay.get({"kind": "page", "url": "http://b/"}) == {"text": "same"}
    replay.put({"kind": "page", "url": "http://new/"}, {"text": "x"})
    assert replay.get({"kind": "page", "url": "http://new/"}) is None


def test_cache_treats_a_corrupt_blob_as_a_miss(tmp_path):
    cache = WebCache(CacheConfig(path=str(tmp_path)))
    cache.put({"kind": "page", "url": "http://a/"}, {"text": "v"})
    blob = next(p for p in (tmp_path / "blobs").rglob("*") if p.is_file())
    blob.write_text("tampered")
    assert cache.get({"kind": "page", "url": "http://a/"}) is None


def test_replay_without_a_recording_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="readwrite"):
        WebCache(CacheConfig(path=str(tmp_path / "none"), mode="replay"))
    with pytest.raises(ValueError, match="cache.mode='sometimes'"):
        CacheConfig(mode="sometimes")


def test_unknown_config_keys_are_named():
    with pytest.raises(ValueError, match=r"Unknown key\(s\) \['colour'\] under cache"):
        from_dict(CacheConfig, {"colour": 1}, "cache")


def test_tasks_inline_and_parquet(tmp_path):
    inline = load_tasks([{"question": "Q?", "answers": ["a", "A"]}], None)
    assert inline == [
        {"task_id": "task-0", "questions": ["Q?"], "answers": [["a", "A"]], "source": ""}
    ]
    path = tmp_path / "tasks.parquet"
    pd.DataFrame(
        [
            {
                "task_id": "t1",
                "questions": ["q1", "q2"],
                "answers": [["x"], ["y", "z"]],
                "source": "s",
            }
        ]
    ).to_parquet(path)
    assert load_tasks(None, str(path))[0]["answers"] == [["x"], ["y", "z"]]
    with pytest.raises(ValueError, match="2 question"):
        load_tasks([{"questions": ["a", "b"], "answers": [["x"], ["y"], ["z"]]}], None)
    with pytest.raises(ValueError, match="exactly one"):
        load_tasks(None, None)
    with pytest.raises(FileNotFoundError):
        load_tasks(None, str(tmp_path / "missing.parquet"))


def test_html_results_parsed_by_selectors_with_unwrapping():
    spec = HtmlBackend(**{**PRESETS["duckduckgo"][1], "name": "ddg"})
    html = """<div class="result"><a class="result__a"
      href="//duckduckgo.com/l/?uddg=https%3A%2F%2Freal.example%2Fp&rut=1">Real <b>title</b></a>
      <a class="result__snippet">The snippet</a></div>
      <div class="result"><a class="result__a" href="javascript:void(0)">bad</a></div>
      <div class="result"><a class="result__a" href="http://[x">unbalanced</a></div>
      <div class="result"><a class="result__a" href="http://[nohost]/">bracketed</a></div>"""
    results = parse_results(html, "https://html.duckduckgo.com/html/?q=x", spec)
    assert [(r.title, r.url, r.snippet) for r in results] == [
        ("Real title", "https://real.example/p", "The snippet")
    ]


def test_build_backend_errors_name_what_exists():
    with pytest.raises(ValueError, match="Available presets"):
        build_backend(SearchConfig(backend="altavista"))
    with pytest.raises(ValueError, match="incomplete"):
        build_backend(SearchConfig(backend="html", options={"url_template": "http://x/?q={query}"}))
    with pytest.raises(ValueError, match="Unknown key"):
        build_backend(SearchConfig(backend="serper", options={"colour": "red"}))


def test_serper_style_api_takes_its_key_from_the_environment(site, monkeypatch, caplog):
    backend = build_backend(
        SearchConfig(
            backend="serper",
            options={"url": site.url + "/api/search", "api_key_env": "MEMRL_TEST_SEARCH_KEY"},
        )
    )
    http = HttpClient(UrlPolicy(LOCAL_ONLY), timeout_s=5, max_bytes=1_000_000)
    monkeypatch.delenv("MEMRL_TEST_SEARCH_KEY", raising=False)
    with pytest.raises(SearchFailed, match="MEMRL_TEST_SEARCH_KEY"):
        backend.search("zorbania", lambda url: None, http)
    monkeypatch.setenv("MEMRL_TEST_SEARCH_KEY", "wrong")
    with pytest.raises(SearchFailed, match="HTTP 403"):
        backend.search("zorbania", lambda url: None, http)
    monkeypatch.setenv("MEMRL_TEST_SEARCH_KEY", site.api_key)
    caplog.set_level("DEBUG")
    results = backend.search("zorbania capital", lambda url: None, http)
    assert results[0].url == site.url + "/page/zorbania"
    assert "Quillton" in results[0].snippet
    assert site.api_key not in caplog.text
    assert site.api_key not in repr(backend.cache_request("q"))


def test_searxng_json_backend(site):
    backend = build_backend(
        SearchConfig(backend="searxng_json", options={"url": site.url + "/searx/search"})
    )
    http = HttpClient(UrlPolicy(LOCAL_ONLY), timeout_s=5, max_bytes=1_000_000)
    results = backend.search("vornland dish", lambda url: None, http)
    assert results[0].title == "Vornish cuisine"
    assert results[0].url == site.url + "/page/vornish-cuisine"


def test_extract_leaves_out_links_no_parser_accepts():
    page = (
        "<html><body><main><p>Text of the page, long enough to be the main part.</p>"
        "<a href='http://[x'>a</a><a href='http://[nohost]/p'>b</a><a href='/ok'>ok</a>"
        "</main></body></html>"
    )
    _, _, links = extract(page, "http://site.example/", max_links=10)
    assert links == [("ok", "http://site.example/ok")]
