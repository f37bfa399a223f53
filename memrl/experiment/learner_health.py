"""Whether an algorithm's remote learners are alive: RLlib's checkpoint save and restore only mark a
learner whose call failed as unhealthy, without raising, so callers ask here after such a call.

Imports nothing from memrl, so the run directory (which checks before a checkpoint counts) and the
interrupt handling can both use it.
"""

from __future__ import annotations

from typing import Any


def learner_health(algo: Any) -> tuple[int, int] | None:
    """(alive, total) remote learners of the algorithm; None for a local learner."""
    group = getattr(algo, "learner_group", None)
    if group is None or group.is_local:
        return None
    manager = group._worker_manager
    return manager.num_healthy_actors(), manager.num_actors()


def learners_lost(algo: Any) -> bool:
    """Whether one of the algorithm's remote learners is marked unhealthy (dead)."""
    health = learner_health(algo)
    return health is not None and health[0] < health[1]


def raise_if_learners_lost(algo: Any, when: str) -> None:
    """Raises RuntimeError when one of the algorithm's remote learners is marked unhealthy:
    RLlib's checkpoint save and restore only mark a learner whose call failed, without raising."""
    if learners_lost(algo):
        alive, total = learner_health(algo)
        raise RuntimeError(f"{alive} of {total} learners alive {when}")
