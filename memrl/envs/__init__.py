"""Gymnasium environments of memrl, registered under the ``memrl/`` namespace.

Entry points are strings, so registering imports nothing: each env's module (and its dependencies)
loads only when the env is made. ``make_env`` is the one way memrl code builds an env from a config.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

# env id -> "module:Class". Keep this table the single list of what memrl ships.
ENV_ENTRY_POINTS: dict[str, str] = {
    "memrl/DarkKeyToDoor-v0": "memrl.envs.key_door:DarkKeyToDoorEnv",
    "memrl/MemoryCorridor-v0": "memrl.envs.corridor:MemoryCorridorEnv",
    "memrl/ObjNav-v0": "memrl.envs.objnav:ObjNavEnv",
    "memrl/Habitat-v0": "memrl.envs.habitat:HabitatEnv",
    "memrl/DocQA-v0": "memrl.envs.doc_qa:DocQAEnv",
    "memrl/WebSearchQA-v0": "memrl.envs.web_search:WebSearchQAEnv",
    "memrl/WebShop-v0": "memrl.envs.webshop:WebShopEnv",
}

# env id -> "module:Class" of a native vectorized version: ``Class(num_envs, **env_config)`` is a
# gymnasium VectorEnv with NEXT_STEP autoreset that steps all its envs with array operations and
# gives the same trajectories as ``num_envs`` single envs (seeds seed + i). RLlib's env runners use
# it when ``resources.env_vectorize_mode`` is "auto" (the default) or "vector".
VECTOR_ENTRY_POINTS: dict[str, str] = {
    "memrl/DarkKeyToDoor-v0": "memrl.envs.key_door:DarkKeyToDoorVectorEnv",
    "memrl/MemoryCorridor-v0": "memrl.envs.corridor_vector:MemoryCorridorVectorEnv",
    "memrl/ObjNav-v0": "memrl.envs.objnav:ObjNavVectorEnv",
}

for _env_id, _entry_point in ENV_ENTRY_POINTS.items():
    if _env_id not in gym.registry:
        gym.register(
            id=_env_id,
            entry_point=_entry_point,
            vector_entry_point=VECTOR_ENTRY_POINTS.get(_env_id),
            disable_env_checker=True,
        )


def has_vector_env(env_id: str) -> bool:
    """Whether memrl ships a native vectorized version of this env."""
    return env_id in VECTOR_ENTRY_POINTS


def memoryless_success(env_id: str) -> float | None:
    """The best inner-episode success rate without memory on ``env_id``, for the envs that state
    it (a class attribute ``memoryless_success``); None for the others and for ids memrl does not
    ship."""
    entry = ENV_ENTRY_POINTS.get(env_id)
    if entry is None:
        return None
    import importlib

    module, _, name = entry.partition(":")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError:  # an env whose optional dependencies are not installed
        return None
    value = getattr(cls, "memoryless_success", None)
    return None if value is None else float(value)


def make_env(env_id: str, env_config: dict[str, Any] | None = None) -> gym.Env:
    """Builds a registered env, with errors that say what exists and what was wrong.

    Args:
        env_id: a gymnasium id, e.g. ``"memrl/DarkKeyToDoor-v0"``.
        env_config: keyword arguments of the env's constructor.

    Raises:
        ValueError: unknown env id, or keyword arguments the env does not take.
    """
    if env_id not in gym.registry:
        known = sorted(ENV_ENTRY_POINTS) + ["(any other id registered with gymnasium)"]
        raise ValueError(f"Unknown env {env_id!r}. Available: {known}")
    try:
        return gym.make(env_id, **(env_config or {}))
    except TypeError as err:
        raise _config_error(env_id, err) from err


def make_vector_env(
    env_id: str, num_envs: int, env_config: dict[str, Any] | None = None
) -> gym.vector.VectorEnv:
    """Builds the native vectorized version of an env (see ``VECTOR_ENTRY_POINTS``).

    Raises:
        ValueError: the env has no native vectorized version, or bad keyword arguments.
    """
    if env_id not in VECTOR_ENTRY_POINTS:
        raise ValueError(
            f"{env_id!r} has no native vectorized version (those that do: "
            f"{sorted(VECTOR_ENTRY_POINTS)}). Use resources.env_vectorize_mode 'sync' or 'auto'."
        )
    from gymnasium.envs.registration import load_env_creator

    cls = load_env_creator(VECTOR_ENTRY_POINTS[env_id])
    try:
        return cls(num_envs=num_envs, **(env_config or {}))
    except TypeError as err:
        raise _config_error(env_id, err) from err


def _config_error(env_id: str, err: TypeError) -> Exception:
    if "unexpected keyword argument" in str(err) or "positional argument" in str(err):
        return ValueError(
            f"env.config does not fit {env_id}: {err}. Check the keys under env.config "
            "against the env's constructor arguments."
        )
    return err
