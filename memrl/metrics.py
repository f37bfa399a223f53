"""Memory metrics shared by training, evaluation and the benchmarks.

Every figure a run or a benchmark reports about memory is computed here, so that the numbers of
different agents (MEM1, full context, last-k, Memo) are measured the same way:

- context tokens: tokens the model reads at a turn (prompt + kept history), before it generates;
- peak tokens: the max over turns of context + generated tokens (what must sit in the KV cache);
- dependency: the sum over generated tokens of the number of tokens each one attends to, i.e. the
  attention work of generation (a token at position p of a causal sequence attends to p + 1 tokens).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TurnTokens:
    """Token counts of one generation call."""

    context: int
    """Tokens the model was conditioned on (the prompt of this call)."""
    generated: int
    """Tokens it generated."""


def turn_dependency(context: int, generated: int) -> int:
    """Attention work of one turn: generated token i (0-based) attends to context + i + 1 tokens."""
    if context < 0 or generated < 0:
        raise ValueError(f"token counts must be >= 0, got context={context}, generated={generated}")
    return generated * context + generated * (generated + 1) // 2


def peak_tokens(turns: Iterable[TurnTokens]) -> int:
    """Max over turns of context + generated tokens (0 for no turns)."""
    return max((t.context + t.generated for t in turns), default=0)


def dependency(turns: Iterable[TurnTokens]) -> int:
    """Sum of ``turn_dependency`` over the turns of an episode."""
    return sum(turn_dependency(t.context, t.generated) for t in turns)


def episode_memory_metrics(turns: Sequence[TurnTokens]) -> dict[str, float]:
    """The per-episode memory figures logged by runners and benchmarks."""
    return {
        "peak_tokens": float(peak_tokens(turns)),
        "dependency": float(dependency(turns)),
        "mean_context_tokens": float(sum(t.context for t in turns) / max(1, len(turns))),
        "generated_tokens": float(sum(t.generated for t in turns)),
    }
