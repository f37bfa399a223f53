"""Helpers shared by memrl's native vectorized envs (see ``memrl.envs.VECTOR_ENTRY_POINTS``)."""

from __future__ import annotations


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
