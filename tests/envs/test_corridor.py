"""MemoryCorridor: the cue shows once, the junction pays +-1, a trial holds several episodes."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.envs import make_env
from memrl.envs.corridor import MemoryCorridorEnv


def test_cue_visible_only_at_first_step_and_junction_pays():
    env = MemoryCorridorEnv(length=5, episodes_per_trial=1)
    obs, _ = env.reset(seed=3)
    cue = env.cue
    assert obs[cue] == 1.0 and obs[1 - cue] == 0.0 and obs[6] == 1.0
    for _ in range(5):
        obs, reward, term, trunc, _ = env.step(1 - cue)  # corridor actions change nothing
        assert obs[:2].sum() == 0.0 and reward == 0.0 and not term
    assert obs[2] == 1.0  # at the junction
    _, reward, term, trunc, info = env.step(cue)
    assert reward == 1.0 and term and not trunc and info["inner_episode_success"]


def test_wrong_arm_costs_and_trial_spans_episodes():
    env = MemoryCorridorEnv(length=2, episodes_per_trial=3)
    env.reset(seed=0)
    total, steps, done = 0.0, 0, False
    while not done:
        action = 1 - env.cue
        _, r, term, trunc, info = env.step(action)
        total, steps, done = total + r, steps + 1, term or trunc
    assert total == -3.0 and steps == env.trial_len == 9


def test_cues_are_balanced_and_memoryless_play_is_at_chance():
    env = MemoryCorridorEnv(length=1, episodes_per_trial=200)
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    rewards = []
    done = False
    while not done:
        _, r, term, trunc, _ = env.step(int(rng.integers(0, 2)))
        if r:
            rewards.append(r)
        done = term
    assert len(rewards) == 200 and abs(np.mean(rewards)) < 0.2


def test_registered_and_bad_config_named():
    env = make_env("memrl/MemoryCorridor-v0", {"length": 4})
    assert env.observation_space.shape == (7,)
    with pytest.raises(ValueError, match="length"):
        MemoryCorridorEnv(length=-1)
