"""The text envs' action parsers: same answers as the regular expressions they replace.

The references below are the expressions the envs used before (quadratic or worse on long
adversarial inputs); on short inputs built from the tags themselves, the linear scanners must
agree with them exactly. Long inputs are covered by ``test_text_env_fuzz.py``.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from memrl.envs.text import action_text, echo, first_tagged, strip_blocks
from memrl.envs.webshop.engine import parse_action
from memrl.envs.webshop.env import parse_mem1_turn

_FRAGMENTS = [
    "<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>", "<open>", "</open>",
    "<summary>", "</summary>", "<a>", "</a>", "search[", "click[", "[", "]", "x", "y z", " ", "\n",
    "\t", "\u3000", "buy now", "<", ">", "/", "search", "click",
]  # fmt: skip

_text = st.lists(st.sampled_from(_FRAGMENTS), max_size=14).map("".join)
_tagged = st.one_of(
    _text,
    st.builds(
        lambda a, tag, b, c: f"{a}<{tag}>{b}</{tag}>{c}",
        _text, st.sampled_from(["search", "answer", "open", "think", "a"]), _text, _text,
    ),
)  # fmt: skip
_page_action = st.builds(
    lambda pre, kind, arg, post: f"{pre}{kind}[{arg}]{post}",
    st.sampled_from(["", " ", "\n"]), st.sampled_from(["search", "click", "Click"]), _text,
    st.sampled_from(["", " ", "\n", "]"]),
)  # fmt: skip
_SETTINGS = settings(max_examples=600, deadline=None, database=None)


def _old_strip(text: str, tag: str, replacement: str) -> str:
    return re.sub(rf"<{re.escape(tag)}>.*?</{re.escape(tag)}>", replacement, text, flags=re.S)


def _old_first(text: str, tags: tuple[str, ...]) -> tuple[str, str] | None:
    names = "|".join(re.escape(t) for t in tags)
    match = re.search(rf"<({names})>(.*?)</\1>", text, re.S)
    return None if match is None else (match.group(1), match.group(2))


def _old_mem1(action: str, th: str, su: str, an: str) -> str | None:
    turn = re.match(
        rf"^\s*<{th}>(.*?)</{th}>\s*<{su}>(.*?)</{su}>\s*<{an}>(.*?)</{an}>\s*$", action, re.S
    )
    counts = [action.count(f"<{t}>") for t in (th, su, an)]
    answer = turn.group(3).strip() if turn else ""
    if turn is None or counts != [1, 1, 1]:
        return None
    if not re.fullmatch(r"(search|click)\[.+\]", answer, re.S):
        return None
    return answer


def _old_parse_action(action: str) -> tuple[str, str | None]:
    match = re.match(r"(.+)\[(.+)\]", action.strip(), re.S)
    if match is None:
        return action.strip(), None
    return match.group(1).strip(), match.group(2).lower()


@_SETTINGS
@given(_tagged, st.sampled_from(["think", "a", "search"]), st.sampled_from([" ", ""]))
def test_strip_blocks_matches_the_regex(text, tag, replacement):
    assert strip_blocks(text, tag, replacement) == _old_strip(text, tag, replacement)


@_SETTINGS
@given(_tagged, st.sampled_from([("search", "answer"), ("search", "open", "answer"), ("a",)]))
def test_first_tagged_matches_the_regex(text, tags):
    assert first_tagged(text, tags) == _old_first(text, tags)


_turns = st.one_of(
    _text,
    st.builds(
        lambda pre, a, b, c, post: f"{pre}<think>{a}</think>{b}<summary>{c}</summary>{post}",
        _text, _text, _text, _text, _text,
    ),
    st.builds(
        lambda a, b, c, d: f"{a}<think>{b}</think> <summary>x</summary>\n<answer>{c}</answer>{d}",
        st.sampled_from(["", " \n", "x"]), _text, _page_action, st.sampled_from(["", "\n ", "]"]),
    ),
)  # fmt: skip


@_SETTINGS
@given(_turns)
def test_mem1_turn_parser_matches_the_regex(action):
    assert parse_mem1_turn(action, "think", "summary", "answer") == _old_mem1(
        action, "think", "summary", "answer"
    )


def test_mem1_turn_parser_cases():
    ok = "  <think>t</think>\n<summary>s</summary> <answer> click[Buy Now] </answer>\n"
    assert parse_mem1_turn(ok, "think", "summary", "answer") == "click[Buy Now]"
    for bad in [
        "x<think>t</think><summary>s</summary><answer>click[a]</answer>",
        "<think>t</think><summary>s</summary><answer>click[]</answer>",
        "<think>t</think><summary>s</summary><answer>click[a]</answer> tail",
        "<think>t</think><think></think><summary>s</summary><answer>click[a]</answer>",
        "<summary>s</summary><think>t</think><answer>click[a]</answer>",
    ]:
        assert parse_mem1_turn(bad, "think", "summary", "answer") is None, bad


@_SETTINGS
@given(st.one_of(_text, _page_action))
def test_page_action_parser_matches_the_regex(action):
    assert parse_action(action) == _old_parse_action(action)


def test_action_text_sanitizes_once_and_refuses_long_actions():
    assert action_text("a\ud800b\udfff", 10) == ("a\ufffdb\ufffd", None)
    assert action_text(None, 10) == ("", None)
    assert action_text(b"caf\xc3\xa9 \xff", 10) == ("café \ufffd", None)
    assert action_text(12, 10) == ("12", None)
    text, message = action_text("x" * 11, 10)
    assert text == "" and "it has 11 characters; at most 10 are allowed" in message
    assert echo("x" * 500) == "x" * 200 + "... [300 more characters]"
    assert echo("short") == "short"
