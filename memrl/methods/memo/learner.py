"""PPO learner for Memo: minibatches of whole-trial rows instead of shuffled single steps.

RLlib's MiniBatchCyclicIterator slices a batch by timesteps (or by max_seq_len sequences for
stateful modules). Memo's rows are trials from their first step (see memo_batch.py), which must stay
whole. This learner shuffles rows every epoch and packs them into minibatches of about
``minibatch_size`` loss steps, each trimmed to its longest row. The loss is RLlib's PPO loss
(PPOTorchLearner.compute_loss_for_module), masked by LOSS_MASK. One learner only (with several,
their minibatch counts could differ and DDP would wait forever).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch


class MemoPPOLearner(PPOTorchLearner):
    """PPOTorchLearner whose minibatches are whole (B, T) trial rows."""

    def _create_iterator_if_necessary(
        self,
        *,
        training_data: Any,
        num_total_minibatches: int = 0,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        shuffle_batch_per_epoch: bool = False,
        **kwargs: Any,
    ) -> Any:
        if training_data.episodes is None:
            return super()._create_iterator_if_necessary(
                training_data=training_data,
                num_total_minibatches=num_total_minibatches,
                num_epochs=num_epochs,
                minibatch_size=minibatch_size,
                shuffle_batch_per_epoch=shuffle_batch_per_epoch,
                **kwargs,
            )
        episodes = _flatten(training_data.episodes)
        batch = self._learner_connector(
            rl_module=self.module, batch={}, episodes=episodes, shared_data={}, metrics=self.metrics
        )
        env_steps = sum(len(e) for e in episodes)
        return list(
            row_minibatches(
                batch,
                minibatch_size or env_steps,
                num_epochs,
                env_steps,
                seed=int(self._weights_seq_no),
            )
        )


def _flatten(episodes: Any) -> list[Any]:
    out = []
    for e in episodes:
        out.extend(_flatten(e) if isinstance(e, list | tuple) else [e])
    return out


def row_minibatches(
    batch: dict[str, dict[str, torch.Tensor]],
    minibatch_size: int,
    num_epochs: int,
    env_steps: int,
    seed: int = 0,
) -> Iterator[MultiAgentBatch]:
    """Yields MultiAgentBatches of whole rows with about ``minibatch_size`` loss steps each."""
    rng = np.random.default_rng(seed)
    for _ in range(num_epochs):
        for mid, data in batch.items():
            mask = data[Columns.LOSS_MASK]
            steps = mask.sum(dim=1).cpu().numpy()
            order = rng.permutation(len(steps))
            group: list[int] = []
            count = 0
            for i in order:
                group.append(int(i))
                count += int(steps[i])
                if count >= minibatch_size:
                    yield _rows(mid, data, group, env_steps)
                    group, count = [], 0
            if group:
                yield _rows(mid, data, group, env_steps)


def _rows(
    mid: str, data: dict[str, torch.Tensor], rows: list[int], env_steps: int
) -> MultiAgentBatch:
    index = torch.tensor(rows, device=data[Columns.LOSS_MASK].device)
    mask = data[Columns.LOSS_MASK][index]
    # Rows keep their first steps (the context); trim only the shared padding at the end.
    seen = mask.any(dim=0).nonzero()
    t_end = int(seen.max()) + 1 if len(seen) else mask.shape[1]
    sub = {k: v[index][:, :t_end] for k, v in data.items()}
    return MultiAgentBatch({mid: SampleBatch(sub)}, env_steps)
