"""Helpers shared by memrl's native vectorized envs (see ``memrl.envs.VECTOR_ENTRY_POINTS``)."""

from __future__ import annotations

from typing import Any

import numpy as np


def per_env_seeds(seed: int | list[int | None] | None, num_envs: int) -> list[int | None]:
    """The seed of each env for ``VectorEnv.reset(seed=...)``, as gymnasium's SyncVectorEnv does it:
    an int gives env i ``seed + i``; a list gives one seed per env; None gives None to every env
    (each keeps its generator, or makes a fresh one).

    Raises:
        ValueError: a list whose length is not ``num_envs``.
    """
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, int):
        return [seed + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(
            f"reset(seed=...) got {len(seeds)} seeds for {num_envs} envs; pass one int (env i "
            "gets seed + i) or one seed per env"
        )
    return seeds


def check_actions(actions: Any, num_envs: int, num_actions: int, started: bool, env: str) -> Any:
    """The actions of one ``VectorEnv.step`` as an int64 array, or a clear error.

    Raises:
        RuntimeError: step() before reset().
        ValueError: not one int in ``[0, num_actions)`` per env.
    """
    if not started:
        raise RuntimeError(f"{env}.step() called before reset(); call reset() first")
    actions = np.asarray(actions)
    if actions.shape != (num_envs,):
        raise ValueError(f"actions must have shape ({num_envs},), one per env; got {actions.shape}")
    if actions.dtype.kind not in "iu" or actions.min() < 0 or actions.max() >= num_actions:
        raise ValueError(
            f"actions must be ints in [0, {num_actions}), got {actions.dtype} values "
            f"{actions.min()}..{actions.max()}"
        )
    return actions.astype(np.int64)
