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

for _env_id, _entry_point in ENV_ENTRY_POINTS.items():
    if _env_id not in gym.registry:
        gym.register(id=_env_id, entry_point=_entry_point, disable_env_checker=True)


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
        if "unexpected keyword argument" in str(err) or "positional argument" in str(err):
            raise ValueError(
                f"env.config does not fit {env_id}: {err}. Check the keys under env.config "
                "against the env's constructor arguments."
            ) from err
        raise
