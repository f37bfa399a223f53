"""Which sampled episodes an update trains on: RAFT's success filter, dynamic sampling's groups.

- RAFT and imitation keep the episodes that solved their task outright (``episode_success``:
  the env's ``success``, ended by the agent's own answer, no format error), so an answer that is
  only partly right ("1931; 1931" for two questions) never enters the NLL.
- GRPO with dynamic sampling keeps the groups whose rewards differ; a group whose members all
  scored the same has every advantage 0 and adds only tokens to the mean's denominator.
- PPO, and GRPO without dynamic sampling, keep every episode.

``groups_with_signal`` counts what dynamic sampling waits for: GRPO groups whose rewards
differ; RAFT groups holding at least one kept episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from memrl.methods.mem1.advantages import episode_rewards
from memrl.methods.mem1.rollout import episode_success


def varying_groups(rewards: np.ndarray, groups: Sequence[str]) -> set[str]:
    """The groups whose rewards are not all equal (groups of one never vary)."""
    keys, values = np.asarray(groups), np.asarray(rewards)
    return {str(g) for g in np.unique(keys) if np.ptp(values[keys == g]) > 0}


def select_episodes(
    episodes: Sequence[Any], algorithm: str, *, format_penalty: float, dynamic_sampling: bool
) -> list[Any]:
    """The episodes an update of ``algorithm`` trains on, in their sampled order."""
    if algorithm in ("raft", "imitation"):
        return [ep for ep in episodes if episode_success(ep)]
    if algorithm == "grpo" and dynamic_sampling and episodes:
        rewards = episode_rewards(episodes, format_penalty)
        keep = varying_groups(rewards, [ep.group_id for ep in episodes])
        return [ep for ep in episodes if ep.group_id in keep]
    return list(episodes)


def groups_with_signal(selected: Sequence[Any]) -> int:
    """Groups represented among the selected episodes (after ``select_episodes``, each carries
    signal: a varying GRPO group, or a RAFT group with a success)."""
    return len({ep.group_id for ep in selected})
