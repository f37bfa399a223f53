"""Per-trial inner-episode metrics: the one place that names and logs them.

Envs that run several inner episodes in one trial (Dark-Key-To-Door, the memory corridor,
ObjNav-lite) get, at each trial's end, the return of inner episode k for the first
``MAX_INDEXED`` indices: an agent that remembers gets better after its first inner episode.
RLlib's episode path (``memrl.experiment.callbacks``) and the bulk runner both log through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_INDEXED = 10
"""Inner-episode indices reported one by one (later ones go into ``inner_return_later``)."""
SPREAD_INDEXED = 5
"""Indices whose mean squared return is logged too (``inner_return_sq_<k>``): with the mean it
gives the spread the training summary needs to tell a memory gain from noise."""
WINDOW = 100
"""Trials each mean is smoothed over."""


def log_trial_inner_episodes(
    metrics_logger: Any,
    first_returns: Sequence[float],
    later_returns_mean: float | None,
    count: int,
    successes: int,
) -> None:
    """Logs one finished trial's inner episodes.

    Args:
        metrics_logger: RLlib's MetricsLogger of the env runner.
        first_returns: returns of inner episodes 0 .. MAX_INDEXED - 1 (fewer if the trial had
            fewer).
        later_returns_mean: the mean return of inner episodes MAX_INDEXED and later (None: none).
        count: inner episodes in the trial (>= 1).
        successes: how many of them succeeded.
    """
    for k, ret in enumerate(first_returns[:MAX_INDEXED]):
        ret = float(ret)
        metrics_logger.log_value(f"inner_return_{k}", ret, reduce="mean", window=WINDOW)
        if k < SPREAD_INDEXED:
            metrics_logger.log_value(
                f"inner_return_sq_{k}", ret * ret, reduce="mean", window=WINDOW
            )
    if later_returns_mean is not None:
        metrics_logger.log_value(
            "inner_return_later", float(later_returns_mean), reduce="mean", window=WINDOW
        )
    metrics_logger.log_value("inner_success_rate", successes / count, reduce="mean", window=WINDOW)
    metrics_logger.log_value("inner_episodes", count, reduce="mean", window=WINDOW)
