"""GAE over (T, N) rollout arrays: values worked out by hand, and a per-env loop as reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memrl.rollout.gae import gae


def _run(values, rewards, terminated, truncated, valid, gamma, lam):
    adv, targets = gae(
        torch.tensor(values, dtype=torch.float32),
        torch.tensor(rewards, dtype=torch.float32),
        torch.tensor(terminated),
        torch.tensor(truncated),
        torch.tensor(valid),
        gamma=gamma,
        lambda_=lam,
    )
    return adv.numpy(), targets.numpy()


def test_boundaries_worked_by_hand():
    """Two envs, gamma = lambda = 0.5. Env 0: a step, a truncation at t=1 (bootstrap: the value
    on the reset row at t=2, the trial's final observation), the reset row, a step that
    bootstraps from the rollout's last value. Env 1: the same with a termination at t=1."""
    values = [[1.0, 1.0], [2.0, 2.0], [6.0, 6.0], [0.0, 0.0], [8.0, 8.0]]  # (T + 1, N)
    rewards = [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [2.0, 2.0]]
    terminated = [[False, False], [False, True], [False, False], [False, False]]
    truncated = [[False, False], [True, False], [False, False], [False, False]]
    valid = [[True, True], [True, True], [False, False], [True, True]]
    adv, targets = _run(values, rewards, terminated, truncated, valid, 0.5, 0.5)
    # t=3: 2 + 0.5 * 8 - 0 = 6.
    # env 0, t=1: 0 + 0.5 * 6 - 2 = 1 (truncated: bootstrap, nothing flows back from t=2);
    #        t=0: 1 + 0.5 * 2 - 1 + 0.25 * 1 = 1.25.
    # env 1, t=1: 0 - 2 = -2 (terminated: no bootstrap); t=0: 1 + 1 - 1 + 0.25 * -2 = 0.5.
    expected = np.array([[1.25, 0.5], [1.0, -2.0], [0.0, 0.0], [6.0, 6.0]])
    np.testing.assert_allclose(adv, expected, atol=1e-6)
    np.testing.assert_allclose(targets, (expected + np.array(values[:-1])) * np.array(valid))


def _reference(values, rewards, terminated, truncated, valid, gamma, lam):
    """One env and one step at a time, the textbook way."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        following = 0.0  # the advantage of the next step of the same trial
        for t in reversed(range(T)):
            if not valid[t, n]:
                following = 0.0
                continue
            bootstrap = 0.0 if terminated[t, n] else values[t + 1, n]
            delta = rewards[t, n] + gamma * bootstrap - values[t, n]
            ends = terminated[t, n] or truncated[t, n]
            adv[t, n] = delta + (0.0 if ends else gamma * lam * following)
            following = adv[t, n]
    return adv


@pytest.mark.parametrize("seed", range(3))
def test_matches_a_per_env_loop_on_random_rollouts(seed):
    rng = np.random.default_rng(seed)
    T, N = 23, 7
    values = rng.normal(size=(T + 1, N))
    rewards = rng.normal(size=(T, N))
    ends = rng.random((T, N)) < 0.15
    terminated = ends & (rng.random((T, N)) < 0.5)
    truncated = ends & ~terminated
    # The row after a trial's end is the NEXT_STEP reset row: not an env step, no reward.
    valid = np.ones((T, N), bool)
    valid[1:] = ~ends[:-1]
    rewards = rewards * valid
    terminated &= valid
    truncated &= valid
    adv, targets = _run(values, rewards, terminated, truncated, valid, 0.97, 0.9)
    ref = _reference(values, rewards, terminated, truncated, valid, 0.97, 0.9)
    np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, (ref + values[:-1]) * valid, rtol=1e-5, atol=1e-5)


def test_values_need_one_more_row_than_rewards():
    with pytest.raises(ValueError, match="T \\+ 1 = 4"):
        gae(
            torch.zeros(3, 2),
            torch.zeros(3, 2),
            torch.zeros(3, 2, dtype=torch.bool),
            torch.zeros(3, 2, dtype=torch.bool),
            torch.ones(3, 2, dtype=torch.bool),
            gamma=0.9,
            lambda_=0.9,
        )
