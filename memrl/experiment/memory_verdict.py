"""The one-sentence verdict on memory use that ends a training summary (and the report's glance).

Two kinds of evidence, whichever the env gives:

- ``memory_line``: envs with several inner episodes per trial. Later inner episodes (1-4) against
  the first one of the same trials; an agent without memory cannot tell them apart. A gain counts
  only above two standard errors of the difference (from the windowed mean squares the callbacks
  log), so a noisy task is not read as memory use.
- ``success_line``: envs that state the best success rate reachable without memory
  (``memoryless_success`` of the env class, e.g. the corridor's coin flip): the agent's success
  against it.
"""

from __future__ import annotations

import math
from typing import Any

# Without a measured spread, a gain must be at least this (absolute, and relative to the first
# inner episode's return) to count as memory use.
BLIND_GAIN = 0.25


def _recent_mean(rows: list[dict[str, Any]]) -> tuple[int, Any]:
    """(how many rows, mean of a key over them) for the last iterations: a tenth, at least 3."""
    recent = rows[-max(3, len(rows) // 10) :]

    def mean_of(key: str) -> float:
        values = [r[key] for r in recent if key in r and math.isfinite(r[key])]
        return sum(values) / len(values) if values else math.nan

    return len(recent), mean_of


def success_line(rows: list[dict[str, Any]], env_id: str) -> str | None:
    """One sentence on memory use for envs that state the best success without memory (the
    corridor's coin flip): the agent's inner-episode success over the last iterations against it."""
    from memrl.envs import memoryless_success

    bound = memoryless_success(env_id)
    if bound is None:
        return None
    n, mean_of = _recent_mean(rows)
    success = mean_of("inner_success_rate")
    if not math.isfinite(success):
        return None
    head = (
        f"memory: success {success:.1%} over the last {n} iterations, against {bound:.0%} at best "
        "for a policy without memory"
    )
    if recalls(success, bound):
        return head + ": the agent recalls what it saw earlier in the trial."
    return head + ": no clear sign of memory use yet (train longer, or see docs/memo.md)."


def recalls(success: float, bound: float) -> bool:
    """Whether a success rate shows memory use against the best one without memory: at least
    halfway from that bound to 1 (the corridor: 75%)."""
    return success >= bound + 0.5 * (1.0 - bound)


def memory_line(rows: list[dict[str, Any]]) -> str | None:
    """One sentence on memory use for envs with inner episodes: the return of inner episodes 1-4
    against the first one of the same trials, over the last iterations (a tenth, at least 3).

    Where the rows carry mean squared returns (``inner_return_sq_<k>``, logged over the same
    100-trial window as the means), a gain counts only when it exceeds two standard errors of the
    difference, so a noisy task (few trials, returns that swing) is not read as memory use."""
    n_recent, mean_of = _recent_mean(rows)
    first = mean_of("inner_return_0")
    indices = [k for k in range(1, 5) if math.isfinite(mean_of(f"inner_return_{k}"))]
    if not math.isfinite(first) or not indices:
        return None
    later_mean = sum(mean_of(f"inner_return_{k}") for k in indices) / len(indices)
    gain = later_mean - first
    which = "1" if len(indices) == 1 else f"1-{indices[-1]}"
    head = (
        f"memory: later inner episodes ({which}) return {later_mean:.2f} on average against "
        f"{first:.2f} for the first one of the same trials"
    )
    noise = recent_gain_noise(rows)
    if noise is None:
        change = f"{gain / abs(first):+.0%}" if first else f"{gain:+.2f}"
        head += f" ({change}, last {n_recent} iterations)"
    else:
        head += f" ({gain:+.2f}, noise +-{noise:.2f} over the last {n_recent} iterations)"
    if gain_is_clear(first, later_mean, noise):
        return head + (
            ": the agent does better once it has seen the layout (without memory the two "
            "would be equal)."
        )
    return head + ": no clear sign of memory use yet (with memory, later ones do better)."


def gain_is_clear(first: float, later: float, noise: float | None) -> bool:
    """Whether later inner episodes beat the first one by more than chance: by at least 10% of
    the first's size and, where the returns' spread is known, by more than ``noise`` (two
    standard errors of the difference). Where it is not (an evaluation's means over a handful of
    trials, runs logged before the spread was), a stricter floor stands in for it: at least 0.25
    and 25% of the first's size."""
    gain = later - first
    if noise is not None:
        return gain > noise and gain >= 0.1 * abs(first)
    return gain >= max(BLIND_GAIN, BLIND_GAIN * abs(first))


def recent_gain_noise(rows: list[dict[str, Any]]) -> float | None:
    """Two standard errors of (mean of later inner episodes 1-4 - first) over the last
    iterations, from the windowed mean squares; None when the rows do not carry them (runs
    logged before they were added) or hold no inner episodes."""
    _, mean_of = _recent_mean(rows)
    indices = [k for k in range(1, 5) if math.isfinite(mean_of(f"inner_return_{k}"))]
    trials = sum(r.get("num_episodes", 0.0) or 0.0 for r in rows)
    n = min(100.0, trials)
    if n < 2 or not indices:
        return None
    variances = []
    for k in [0, *indices]:
        sq = mean_of(f"inner_return_sq_{k}")
        if not math.isfinite(sq):
            return None
        variances.append(max(sq - mean_of(f"inner_return_{k}") ** 2, 0.0))
    # Later indices come from the same trials, so their errors are not independent: take their
    # mean variance as the later mean's (an upper bound) rather than dividing it by their count.
    later_var = sum(variances[1:]) / len(indices)
    return 2.0 * math.sqrt((variances[0] + later_var) / n)
