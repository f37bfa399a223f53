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

    ``options={"task_index": i}`` picks a task deterministically (evaluation, GRPO groups).

``step(action: str) -> (observation, reward, terminated, truncated, info)``
    ``action`` is the model's whole generated text for the turn (state block included); the env
    parses the action tags out of it. Any string is legal input: malformed actions produce an
    observation that says what was wrong, never an exception. The observation already holds the
    turns-left hint. ``info`` carries ``format_error`` (bool) and the env's own outcome metrics
    (QA: ``em``, ``f1``, ``num_searches``; WebShop: ``score``, ``success``).

Tag names are configurable per env through ``TextTags``; the defaults follow the MEM1 code.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym

MAX_TEXT_CHARS = 1_000_000
"""Upper bound of the Text spaces; the real limits (turn tokens, page size) are the envs' own."""

_CHARSET = frozenset(chr(i) for i in range(32, 127)) | frozenset("\n\t")


def text_space() -> gym.spaces.Text:
    """The observation/action space of text envs (printable ASCII is only the sampling charset)."""
    return gym.spaces.Text(max_length=MAX_TEXT_CHARS, min_length=0, charset=_CHARSET)


@dataclass(frozen=True)
class TextTags:
    """Tag names of the turn format (see specs/mem1.md)."""

    state: str = "think"
    """Internal state written every turn (the paper's <IS>)."""
    search: str = "search"
    """A search query."""
    answer: str = "answer"
    """The final answer (QA: parts separated by ';') or, in WebShop, the page action."""
    information: str = "information"
    """Wraps what the env returns after a search."""
