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
- RAFT and imitation: no advantages (their loss is the NLL of the kept episodes' tokens); the
  column holds 1 on loss tokens so that every update batch has the same columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np


def episode_token_sum(
    values: np.ndarray, cols: dict[str, np.ndarray], num_episodes: int
) -> np.ndarray:
    """Per-episode sum of a per-token quantity over loss tokens."""
    mask = cols["loss_mask"]
    return np.bincount(cols["episode"][mask], weights=values[mask], minlength=num_episodes)


def token_returns(token_rewards: np.ndarray, cols: dict[str, np.ndarray]) -> np.ndarray:
    """Reward-to-go over each episode's generated tokens, in generation order (gamma = 1).

    Args:
        token_rewards: (B, T) reward of each loss token (0 elsewhere).

    Returns:
        (B, T) the sum of the episode's token rewards from this token on (0 off loss).
    """
    mask = cols["loss_mask"]
    ep, order = cols["episode"][mask], cols["token_order"][mask]
    rew = token_rewards[mask]
    # Sort by (episode, order descending) and take the running sum within each episode.
    idx = np.lexsort((-order, ep))
    running = np.zeros(len(idx))
    total, prev_ep = 0.0, None
    for n, k in enumerate(idx):
        if ep[k] != prev_ep:
            total, prev_ep = 0.0, ep[k]
        total += rew[k]
        running[n] = total
    out = np.zeros_like(token_rewards, dtype=np.float32)
    flat = np.zeros(len(idx), dtype=np.float32)
    flat[idx] = running
    out[mask] = flat
    return out


def last_token_of_episode(cols: dict[str, np.ndarray], num_episodes: int) -> np.ndarray:
    """(B, T) bool: the last generated token of each episode (where the outcome reward lands)."""
    mask = cols["loss_mask"]
    ep, order = cols["episode"], cols["token_order"]
    last = np.full(num_episodes, -1, dtype=np.int64)
    np.maximum.at(last, ep[mask], order[mask])
    out = np.zeros_like(mask)
    out[mask] = order[mask] == last[ep[mask]]
    return out


def group_normalized(rewards: np.ndarray, groups: Sequence[str], eps: float = 1e-6) -> np.ndarray:
    """GRPO advantages: each reward minus its group's mean, over its group's std (+ eps).

    Groups of one get 0 (nothing to compare with). Groups are never mixed: the statistics of a
    group use only its own members.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.zeros_like(rewards)
    keys = np.asarray(groups)
    for g in np.unique(keys):
        idx = np.nonzero(keys == g)[0]
        if len(idx) < 2:
            continue
        r = rewards[idx]
        out[idx] = (r - r.mean()) / (r.std() + eps)
    return out


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
    algorithm: Literal["ppo", "grpo", "raft", "imitation"],
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
    elif algorithm in ("raft", "imitation"):
        cols["advantages"] = mask.astype(np.float32)
    else:
        raise ValueError(
            f"algorithm must be 'ppo', 'grpo', 'raft' or 'imitation', got {algorithm!r}"
        )
    return stats
