"""Generalized advantage estimation over time-major (T, N) rollout arrays (pure torch).

The same estimator as RLlib's ``compute_value_targets`` (and CleanRL's ppo.py), over all envs at
once: one backward pass over T with (N,)-wide tensor operations, instead of one pass per episode.
"""

from __future__ import annotations

import torch


def gae(
    values: torch.Tensor,
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    valid: torch.Tensor,
    *,
    gamma: float,
    lambda_: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets of a rollout.

    Args:
        values: (T + 1, N) V(obs[t]); row T is the value of the observation after the last step.
        rewards: (T, N).
        terminated: (T, N) bool, the trial ended at step t: no bootstrap.
        truncated: (T, N) bool, the trial was cut at step t: V(obs[t + 1]) (the trial's final
            observation, seen on the reset row that follows) is the bootstrap.
        valid: (T, N) bool, real env steps; the reset rows after a trial's end are not.
        gamma, lambda_: discount and GAE lambda.

    Returns:
        (advantages, value_targets), each (T, N) float32, 0 on rows that are not valid.
    """
    T = rewards.shape[0]
    if values.shape[0] != T + 1:
        raise ValueError(f"values must have T + 1 = {T + 1} rows, got {tuple(values.shape)}")
    values = values.float()
    not_terminal = 1.0 - terminated.float()  # (T, N)
    # An advantage flows back from t + 1 into t only inside one trial.
    propagate = not_terminal * (1.0 - truncated.float())
    deltas = rewards.float() + gamma * not_terminal * values[1:] - values[:-1]  # (T, N)
    advantages = torch.zeros_like(deltas)
    running = torch.zeros_like(deltas[0])
    for t in range(T - 1, -1, -1):
        running = deltas[t] + gamma * lambda_ * propagate[t] * running
        advantages[t] = running
    mask = valid.float()
    advantages = advantages * mask
    return advantages, (advantages + values[:-1]) * mask
