"""Env-to-module connector of Memo: tells the module where each batch row is in its trial."""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.connector_v2 import ConnectorV2

from memrl.methods.memo.columns import MEMO_TRIAL_T


class MemoTrialStep(ConnectorV2):
    """Adds ``memo_trial_t`` (the episode's global timestep) for every single-agent episode."""

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        for sa_episode in self.single_agent_episode_iterator(episodes):
            self.add_batch_item(batch, MEMO_TRIAL_T, sa_episode.t, single_agent_episode=sa_episode)
        return batch


def make_env_to_module(env: Any = None, spaces: Any = None, device: Any = None) -> list[Any]:
    """``AlgorithmConfig.env_runners(env_to_module_connector=...)`` factory."""
    return [MemoTrialStep()]
