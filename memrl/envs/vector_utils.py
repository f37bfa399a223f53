"""Helpers shared by memrl's native vectorized envs (see ``memrl.envs.VECTOR_ENTRY_POINTS``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
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


class NextStepVectorEnv(gym.vector.VectorEnv):
    """Base of memrl's native vector envs: gymnasium's NEXT_STEP autoreset (the step after a
    trial ends resets that env and returns its first observation, reward 0, action ignored),
    one generator per env seeded as SyncVectorEnv seeds its envs, and the step's checks.

    A subclass calls ``_setup`` in ``__init__``, ``_seed`` in ``reset`` and ``_begin_step`` first
    in ``step``, and sets ``_needs_reset`` to the envs whose trial ended at the end of ``step``.
    """

    metadata = {"render_modes": [], "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def _setup(self, num_envs: Any, single_obs: gym.Space, num_actions: int) -> None:
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        self.num_envs = num_envs
        self.num_actions = num_actions
        self.single_observation_space = single_obs
        self.single_action_space = gym.spaces.Discrete(num_actions)
        self.observation_space = gym.vector.utils.batch_space(single_obs, num_envs)
        self.action_space = gym.spaces.MultiDiscrete(np.full(num_envs, num_actions))
        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        self._needs_reset = np.zeros(num_envs, bool)
        self._started = False

    def _seed(self, seed: int | list[int | None] | None) -> None:
        """Seeds each env's generator (``per_env_seeds``; None keeps existing ones) and marks
        every env as started afresh."""
        from gymnasium.utils import seeding

        for i, s in enumerate(per_env_seeds(seed, self.num_envs)):
            if s is not None or self._rngs[i] is None:
                self._rngs[i] = seeding.np_random(s)[0]
        self._needs_reset[:] = False
        self._started = True

    def _begin_step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(actions as int64, envs that reset at this step, envs that act) of one step."""
        actions = check_actions(
            actions, self.num_envs, self.num_actions, self._started, type(self).__name__
        )
        restart = self._needs_reset.copy()
        return actions, restart, ~restart


def ending_infos(values: dict[str, np.ndarray], ends: np.ndarray) -> dict[str, Any]:
    """gymnasium's vector infos of the inner episodes that end at a step: each key's array and
    its ``_key`` mask (``ends``)."""
    infos: dict[str, Any] = {}
    for key, value in values.items():
        infos[key] = value
        infos["_" + key] = ends
    return infos
