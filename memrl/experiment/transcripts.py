"""Reading the transcripts of text-agent evaluations (JSONL, one episode per line) for the report.

An episode line holds what ``memrl eval`` of a MEM1 or full-context run writes: ``prompt``,
``turns`` (per turn: ``generated`` text, the ``observation`` that followed, ``context_tokens``),
``reward`` and the env's outcome (``em``, ``f1``, ...) and memory figures (``peak_tokens``,
``dependency``, ...). Any of these may be missing; the reader fills in what it can and never fails
on an older or newer line layout.

Tokens kept and dropped per turn: a turn's context is the prompt plus the last ``k`` turns of the
context policy (MEM1: ``k = 1``, the latest internal state, action and observation; ``full``:
every turn). Keeping every turn instead would have cost the prompt plus all earlier turns. With
the context sizes ``c_j`` of every turn, turn ``t``'s share ``s_t`` (its kept generation plus its
observation) follows from ``c_j = c_0 + s_{j-k} + ... + s_{j-1}``, so the dropped tokens of turn
``j`` are ``c_0 + s_0 + ... + s_{j-1} - c_j``. A line may also carry ``kept_tokens`` and
``dropped_tokens`` per turn; those are used as they are.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

OUTCOME_KEYS = ("reward", "em", "f1", "format_errors", "truncated")
"""Per-episode outcome fields shown in the episode list (when present)."""
MEMORY_KEYS = ("peak_tokens", "dependency", "mean_context_tokens", "generated_tokens")
"""Per-episode memory fields shown in the episode list (when present)."""


def window_of(policy: str, last_k: int = 1) -> int | None:
    """Turns a context policy keeps (None: all of them)."""
    if policy == "full":
        return None
    if policy == "last_k":
        return max(1, int(last_k))
    return 1


def token_split(contexts: list[int], window: int | None) -> list[tuple[int, int]]:
    """(kept, dropped) tokens per turn from the context sizes of a turn sequence.

    Args:
        contexts: ``c_j``, the context tokens of turns 0..J-1.
        window: turns the policy keeps (None: all, so nothing is dropped).
    """
    if not contexts:
        return []
    if window is None:
        return [(c, 0) for c in contexts]
    c0 = contexts[0]
    shares: list[int] = []
    out = [(c0, 0)]
    for j in range(1, len(contexts)):
        # s_{j-1} = c_j - c_0 - (s_{j-k} + ... + s_{j-2})
        inside = sum(shares[max(0, j - window) : j - 1])
        shares.append(contexts[j] - c0 - inside)
        full = c0 + sum(shares)
        out.append((contexts[j], max(0, full - contexts[j])))
    return out


def read_transcripts(
    path: str | Path, *, policy: str = "mem1", last_k: int = 1, limit: int = 50
) -> dict[str, Any]:
    """The episodes of a transcripts file, normalized for the report's transcript browser.

    Returns:
        ``{"episodes": [...], "total": N}`` with at most ``limit`` episodes; each has ``id``,
        ``prompt``, ``outcome`` (numbers), ``memory`` (numbers) and ``turns`` (``generated``,
        ``observation``, ``context_tokens``, ``kept_tokens``, ``dropped_tokens``; counts are
        None when unknown).
    """
    episodes: list[dict[str, Any]] = []
    total = 0
    window = window_of(policy, last_k)
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as err:
                logger.warning("%s line %d is not JSON (%s); skipped", path, number, err)
                continue
            if not isinstance(raw, dict):
                continue
            total += 1
            if len(episodes) < limit:
                episodes.append(normalize_episode(raw, window, fallback_id=total - 1))
    return {"episodes": episodes, "total": total}


def normalize_episode(raw: dict[str, Any], window: int | None, fallback_id: int) -> dict[str, Any]:
    """One transcript line as the report shows it (see ``read_transcripts``)."""
    turns_raw = [t for t in raw.get("turns") or [] if isinstance(t, dict)]
    contexts = [_int(t.get("context_tokens")) for t in turns_raw]
    derived = token_split(contexts, window) if all(c is not None for c in contexts) else []
    turns = []
    for j, t in enumerate(turns_raw):
        kept, dropped = derived[j] if derived else (None, None)
        turns.append(
            {
                "generated": str(t.get("generated", t.get("action", ""))),
                "observation": str(t.get("observation", "")),
                "context_tokens": contexts[j],
                "kept_tokens": _int(t.get("kept_tokens"), default=kept),
                "dropped_tokens": _int(t.get("dropped_tokens"), default=dropped),
            }
        )
    outcome = {k: _number(raw[k]) for k in OUTCOME_KEYS if _number(raw.get(k)) is not None}
    memory = {k: _number(raw[k]) for k in MEMORY_KEYS if _number(raw.get(k)) is not None}
    return {
        "id": str(raw.get("task_id", raw.get("id", fallback_id))),
        "prompt": str(raw.get("prompt", "")),
        "answer": raw.get("answer", raw.get("answers")),
        "outcome": outcome,
        "memory": memory,
        "turns": turns,
    }


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def _int(value: Any, default: int | None = None) -> int | None:
    number = _number(value)
    return default if number is None else int(number)
