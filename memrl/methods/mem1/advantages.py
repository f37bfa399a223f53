"""Advantages of a row batch: PPO's KL-shaped token rewards and returns, GRPO's group scores.

``add_advantages`` is the step between the learner's scoring pass (``TokenLearner.score_rows``)
and the minibatch updates: it writes ``old_logp``, ``ref_logp``, ``advantages`` (and PPO's
``old_values``, ``returns``) into the row batch (memrl/methods/mem1/batch.py for the columns).

- PPO: token reward ``-kl_coef * (log pi_old - log pi_ref)`` on every generated token, plus the
  episode's outcome (env reward minus ``format_penalty`` per unparsable turn) on its last generated
  token; returns are reward-to-go over the episode's generated tokens in generation order
  (gamma = lambda = 1, across turns and rows); advantages = returns - V_old, optionally whitened
  over the batch's generated tokens.
- GRPO: each episode's outcome minus its group's mean, over the group's std, broadcast to the
  episode's generated tokens (groups never mix: ``TextEpisode.group_id``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from memrl.methods.mem1.batch import (
    episode_token_sum,
    group_normalized,
    last_token_of_episode,
    token_returns,
)


def episode_rewards(episodes: Sequence[Any], format_penalty: float) -> np.ndarray:
    """(E,) float64 outcome of each episode: env reward - format_penalty x format errors."""
    return np.asarray(
        [ep.env_reward - format_penalty * ep.format_errors for ep in episodes], dtype=np.float64
    )


def add_advantages(
    cols: dict[str, np.ndarray],
    scored: dict[str, np.ndarray],
    episodes: Sequence[Any],
    *,
    algorithm: Literal["ppo", "grpo"],
    kl_coef: float,
    format_penalty: float = 0.0,
    whiten: bool = True,
    recompute_old_logp: bool = True,
) -> dict[str, float]:
    """Adds ``old_logp``, ``ref_logp``, ``advantages`` (PPO: ``old_values``, ``returns``) to
    ``cols`` and returns the batch's statistics.

    Args:
        cols: the row batch of ``episodes`` (``build_rows``), (B, T) columns.
        scored: the learner's pre-update pass over ``cols``: ``logp`` (needed with
            ``recompute_old_logp``), ``ref_logp`` (needed when ``kl_coef`` > 0) and, for PPO,
            ``values``, each (B, T) float32.
        episodes: the ``TextEpisode``s the rows were built from, in the same order.
        recompute_old_logp: ratio denominators from ``scored["logp"]`` (else the rollout's
            behaviour log-probs).
    """
    mask = cols["loss_mask"]
    rewards = episode_rewards(episodes, format_penalty)
    cols["old_logp"] = scored["logp"] if recompute_old_logp else cols["behaviour_logp"]
    if kl_coef > 0:
        cols["ref_logp"] = scored["ref_logp"]
    else:  # no KL term: the reference is never read, so it was not computed
        cols["ref_logp"] = scored.get("ref_logp", cols["old_logp"])
    stats = {
        "reward_mean": float(rewards.mean()),
        "train_rows": float(mask.shape[0]),
        "train_tokens": float((cols["seg"] != cols["vis"].shape[1] - 1).sum()),
    }
    if "logp" in scored:  # learner vs rollout log-probs, where the learner computed its own
        gap = np.abs(scored["logp"] - cols["behaviour_logp"])[mask]
        stats["logp_gap_mean"] = float(gap.mean()) if gap.size else 0.0
        stats["logp_gap_max"] = float(gap.max()) if gap.size else 0.0
    if algorithm == "ppo":
        kl = (cols["old_logp"] - cols["ref_logp"]) * mask
        token_rewards = -kl_coef * kl
        last = last_token_of_episode(cols, len(episodes))
        token_rewards[last] += rewards[cols["episode"][last]]
        returns = token_returns(token_rewards.astype(np.float32), cols)
        advantages = (returns - scored["values"]) * mask
        if whiten and mask.any():
            a = advantages[mask]
            advantages[mask] = (a - a.mean()) / (a.std() + 1e-8)
        cols["returns"] = returns.astype(np.float32)
        cols["old_values"] = scored["values"]
        cols["advantages"] = advantages.astype(np.float32)
        stats["kl_reward_mean"] = float(episode_token_sum(kl, cols, len(episodes)).mean())
    elif algorithm == "grpo":
        adv = group_normalized(rewards, [ep.group_id for ep in episodes])
        ep_index = np.where(mask, cols["episode"], 0)
        cols["advantages"] = np.where(mask, adv[ep_index], 0.0).astype(np.float32)
    else:
        raise ValueError(f"algorithm must be 'ppo' or 'grpo', got {algorithm!r}")
    return stats
