"""Env-to-module connector of Memo: tells the module where each batch row is in its trial."""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.connector_v2 import ConnectorV2

MEMO_TRIAL_T = "memo_trial_t"
"""Batch column: the step index (0 = first step) of each row's observation within its trial."""

MEMO_FROZEN_FEATURES = "memo_frozen_features"
"""Extra model output / learner column: a frozen image encoder's features of each step's
observation (MemoRLModule with ``image_slice``), computed once on the env runner."""


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
