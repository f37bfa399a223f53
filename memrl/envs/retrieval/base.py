"""What every retriever returns and the one method it has.

A retriever maps a batch of queries to ranked hits. The local index (``LocalRetriever``), the HTTP
client of the Search-R1 protocol (``HTTPRetriever``) and the shared Ray service
(``RayRetriever``) all implement ``retrieve``, so an env never knows where its passages come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

MAX_TOPK = 100
"""Largest top-k a retriever serves (a protocol guard: bigger requests are client errors)."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage."""

    id: str
    """Passage id from the corpus."""
    title: str
    """Passage title."""
    text: str
    """Passage text, without the title."""
    score: float
    """Retriever score (higher is better); NaN when the server sent none."""


@runtime_checkable
class Retriever(Protocol):
    """Anything that answers a batch of queries with ranked passages."""

    def retrieve(self, queries: list[str], topk: int) -> list[list[Hit]]:
        """Returns, for each query, at most ``topk`` hits, best first."""
        ...


def check_topk(topk: object) -> int:
    """Validates a top-k value (an int in [1, MAX_TOPK]) and returns it."""
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise TypeError(f"topk must be an int in [1, {MAX_TOPK}], got {topk!r}")
    if not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"topk must be in [1, {MAX_TOPK}], got {topk}; ask for fewer passages.")
    return topk
