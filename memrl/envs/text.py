"""The protocol every text environment of memrl follows (doc-QA, live web search, WebShop).

A text env is a ``gymnasium.Env`` whose observations and actions are strings, so that the multi-turn
text env runner (``memrl.runners``) can drive any of them with any context policy (MEM1, full,
last-k) and any generation backend:

``reset(seed=None, options=None) -> (observation, info)``
    ``observation`` is the task as the agent first sees it (for QA: the questions joined by "; ";
    for WebShop: the first page inside the state block). ``info`` carries at least:

    - ``task_id`` (str): identifies the task; GRPO groups rollouts by it, never across tasks;
    - ``task`` (dict): what a prompt template needs (QA: ``questions``; WebShop: ``instruction``);
    - ``max_turns`` (int): the turn limit of this episode.

    ``options={"task_index": i}`` picks a task deterministically (evaluation, GRPO groups);
    every env reads it with ``pick_task``.

``step(action: str) -> (observation, reward, terminated, truncated, info)``
    ``action`` is the model's whole generated text for the turn (state block included); the env
    parses the action tags out of it. Any string is legal input: malformed actions produce an
    observation that says what was wrong, never an exception. The observation already holds the
    turns-left hint (``turns_left_hint``, the same wording in every env). ``info`` carries
    ``format_error`` (bool) and the env's own outcome metrics (QA: ``em``, ``f1``,
    ``num_searches``; WebShop: ``score``, ``success``). ``success`` (``INFO_SUCCESS``) marks an
    episode that solved its task outright; MEM1's reward-filtered update trains on those only.

    Every env passes the action through ``action_text`` first: non-strings become strings, an
    action longer than the env's ``max_action_chars`` is refused with an observation that says
    so, and lone surrogates (which no encoder accepts) become U+FFFD, once, at the boundary;
    observations built from outside text (web pages, catalogues) go through ``clean_text``.
    Parsing is linear in the action's length (``strip_blocks``, ``first_tagged``: plain string
    scans, no backtracking regular expressions), and text copied from an action into an
    observation goes through ``echo``, so observations stay short whatever the action.

Tag names are configurable per env through ``TextTags``; the defaults follow the MEM1 code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

MAX_TEXT_CHARS = 1_000_000
"""Upper bound of the Text spaces; the real limits (turn tokens, page size) are the envs' own."""

MAX_ACTION_CHARS = 65_536
"""Default of the envs' ``max_action_chars``: about 16k tokens, far above a turn's generation
budget (``max_tokens_per_turn`` is 1000 in the MEM1 configs), far below the Text space's bound."""

INFO_SUCCESS = "success"
"""Info key of the last step: the task solved outright (QA: every question exactly right)."""

MAX_ECHO_CHARS = 200
"""Most characters of an action that ``echo`` copies into an observation."""

_CHARSET = frozenset(chr(i) for i in range(32, 127)) | frozenset("\n\t")
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_space() -> gym.spaces.Text:
    """The observation/action space of text envs (printable ASCII is only the sampling charset)."""
    return gym.spaces.Text(max_length=MAX_TEXT_CHARS, min_length=0, charset=_CHARSET)


@dataclass(frozen=True)
class TextTags:
    """Tag names of the turn format (the MEM1 paper's names by default)."""

    state: str = "think"
    """Internal state written every turn (the paper's <IS>)."""
    search: str = "search"
    """A search query."""
    answer: str = "answer"
    """The final answer (QA: parts separated by ';') or, in WebShop, the page action."""
    information: str = "information"
    """Wraps what the env returns after a search."""


def action_text(action: object, max_chars: int) -> tuple[str, str | None]:
    """The action as the envs parse it, or why it is refused.

    Args:
        action: what ``step`` received (a str; None, bytes and other objects are tolerated).
        max_chars: the env's ``max_action_chars``.

    Returns:
        ``(text, None)`` with lone surrogates replaced by U+FFFD, or ``("", message)`` when the
        action has more than ``max_chars`` characters (the message is meant for the agent).
    """
    if action is None:
        text = ""
    elif isinstance(action, str):
        text = str(action)
    elif isinstance(action, bytes | bytearray):
        text = bytes(action).decode("utf-8", "replace")
    else:
        text = str(action)
    if len(text) > max_chars:
        return "", (
            f"Invalid response: it has {len(text)} characters; at most {max_chars} are "
            "allowed. Write a shorter response."
        )
    return clean_text(text), None


def clean_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD: what every observation and parsed
    action goes through, since no encoder (tokenizers included) accepts them."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def echo(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """Action text quoted in an observation: at most ``limit`` characters, then a count."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def strip_blocks(text: str, tag: str, replacement: str = " ") -> str:
    """Replaces every ``<tag>...</tag>`` block (shortest, left to right) with ``replacement``.

    Same result as ``re.sub(r"<tag>.*?</tag>", replacement, text, flags=re.S)``, in linear time:
    once an opening tag has no closing tag after it, no later one has either.
    """
    opening, closing = f"<{tag}>", f"</{tag}>"
    pieces, pos = [], 0
    while (start := text.find(opening, pos)) >= 0:
        end = text.find(closing, start + len(opening))
        if end < 0:
            break
        pieces += [text[pos:start], replacement]
        pos = end + len(closing)
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


def first_tagged(text: str, tags: tuple[str, ...]) -> tuple[str, str] | None:
    """The leftmost ``<t>content</t>`` for any ``t`` in ``tags``, as ``(t, content)``.

    Same as ``re.search(r"<(t1|t2)>(.*?)</\\1>", text, re.S)`` for distinct tag names, in
    linear time: an opening tag matches when its closing tag occurs anywhere after it, which the
    last closing tag of each name answers at once.
    """
    last_close = {tag: text.rfind(f"</{tag}>") for tag in tags}
    best: tuple[int, str] | None = None
    for tag in tags:
        opening = f"<{tag}>"
        start = text.find(opening)
        if start >= 0 and last_close[tag] >= start + len(opening):
            if best is None or start < best[0]:
                best = (start, tag)
    if best is None:
        return None
    start, tag = best
    begin = start + len(f"<{tag}>")
    return tag, text[begin : text.find(f"</{tag}>", begin)]


def pick_task(
    np_random: np.random.Generator, options: dict[str, Any] | None, num_tasks: int, where: str
) -> int:
    """The task index of an episode: ``options["task_index"]``, else one drawn from
    ``np_random`` (the env's seeded generator).

    Args:
        where: what the tasks are, for the error message (e.g. "split 'test'").

    Raises:
        TypeError: task_index is not an int.
        ValueError: task_index is outside 0..num_tasks - 1.
    """
    index = (options or {}).get("task_index")
    if index is None:
        return int(np_random.integers(num_tasks))
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise TypeError(f"options['task_index'] must be an int, got {index!r}")
    if not 0 <= index < num_tasks:
        raise ValueError(
            f"task_index {index} is outside {where} (0..{num_tasks - 1}): out of range of its "
            f"{num_tasks} tasks; give one in range, or no task_index for a random task."
        )
    return int(index)


def turns_left_hint(turns_left: int, last_turn: str) -> str:
    """The ``[HINT]`` block that tells the agent how many turns remain; ``last_turn`` (what it
    must do now) is added when one remains."""
    if turns_left <= 0:
        text = "You have no turns left."
    elif turns_left == 1:
        text = f"You have 1 turn left. {last_turn}"
    else:
        text = f"You have {turns_left} turns left."
    return f"[HINT]{text}[/HINT]"
