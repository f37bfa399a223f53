"""Deliberate env faults, to test that a run survives a crashing env (see FaultInjection)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class InjectedEnvError(RuntimeError):
    """The error a StepErrorInjector raises; its type makes injected faults easy to tell apart."""


class StepErrorInjector(gym.Wrapper):
    """Raises InjectedEnvError from ``step`` with a given probability."""

    def __init__(self, env: gym.Env, probability: float, seed: int = 0) -> None:
        super().__init__(env)
        self.probability = probability
        self._rng = np.random.default_rng(seed)

    def step(self, action: Any) -> Any:
        if self._rng.random() < self.probability:
            raise InjectedEnvError(f"injected env step failure (p={self.probability})")
        return self.env.step(action)
