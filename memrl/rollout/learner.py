"""``BulkPPOLearner``: RLlib's PPO learner trained directly on bulk ``Rollout`` arrays.

For a list of rollouts (what ``BulkEnvRunner.sample`` returns), the train batch is built in a few
tensor operations instead of RLlib's learner connectors: the values of every observation in one
forward pass (row T of each rollout is the bootstrap), GAE over the (T, N) arrays (gae.py),
advantages standardized over the real env steps, then the real steps flattened into one batch
and cut into shuffled minibatches. The loss is RLlib's PPO loss, unchanged. Episodes (RLlib's
own sampling path) go through RLlib's pipeline as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    MODULE_TRAIN_BATCH_SIZE_MEAN,
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    WEIGHTS_SEQ_NO,
)

from memrl.rollout.arrays import Rollout, as_tensor
from memrl.rollout.gae import gae


class StepsLoggedOnce:
    """Learner mixin: RLlib's steps-trained metrics logged once per update, not per minibatch
    (its lifetime sums cost ~2 ms a call on CPU: a fifth of a small MLP's update)."""

    _steps_to_log: list[tuple[int, int]] | None = None
    _steps_done = 0

    def log_steps_once(self, minibatches: list[MultiAgentBatch]) -> list[MultiAgentBatch]:
        """Registers the minibatches of this update (returns them)."""
        self._steps_to_log = [
            (sum(len(b) for b in m.policy_batches.values()), m.env_steps()) for m in minibatches
        ]
        self._steps_done = 0
        return minibatches

    def _log_steps_trained_metrics(self, batch: MultiAgentBatch) -> None:
        """At the update's last registered minibatch, logs what RLlib logs per minibatch."""
        pending = self._steps_to_log
        if not pending:
            return super()._log_steps_trained_metrics(batch)
        self._steps_done += 1
        if self._steps_done < len(pending):
            return None
        module_steps = sum(m for m, _ in pending)
        env_steps = sum(e for _, e in pending)
        count = len(pending)
        self._steps_to_log = None
        (mid,) = batch.policy_batches.keys()
        log = self.metrics.log_value
        log((mid, WEIGHTS_SEQ_NO), self._weights_seq_no, window=1)
        log((mid, MODULE_TRAIN_BATCH_SIZE_MEAN), module_steps / count, reduce="mean")
        log((mid, NUM_MODULE_STEPS_TRAINED), module_steps, reduce="sum")
        log(
            (mid, NUM_MODULE_STEPS_TRAINED_LIFETIME),
            module_steps,
            reduce="lifetime_sum",
            with_throughput=True,
        )
        for key, value, reduce in (
            (NUM_MODULE_STEPS_TRAINED, module_steps, "sum"),
            (NUM_MODULE_STEPS_TRAINED_LIFETIME, module_steps, "lifetime_sum"),
            (NUM_ENV_STEPS_TRAINED, env_steps, "sum"),
            (NUM_ENV_STEPS_TRAINED_LIFETIME, env_steps, "lifetime_sum"),
        ):
            log((ALL_MODULES, key), value, reduce=reduce, with_throughput=True)
        return None


@dataclass(frozen=True)
class BulkUpdate:
    """What one learner update on bulk rollouts works from."""

    module_id: str
    module: RLModule
    """The unwrapped module."""
    config: Any
    """The module's algorithm config (gamma, lambda_, ...)."""
    rollouts: list[Rollout]
    minibatch_size: int | None
    """None: the whole batch."""
    num_epochs: int


class RolloutLearner(StepsLoggedOnce):
    """Learner mixin of the bulk path: a list of ``Rollout``s (what ``BulkEnvRunner.sample``
    returns) becomes the update's minibatches through ``rollout_minibatches``; anything else
    (RLlib's episodes) goes to the next learner class in the MRO."""

    def _create_iterator_if_necessary(self, *, training_data: Any, **kwargs: Any) -> Any:
        rollouts = rollouts_in(training_data.episodes)
        if rollouts is None:
            return super()._create_iterator_if_necessary(training_data=training_data, **kwargs)
        (module_id,) = self.module.keys()
        update = BulkUpdate(
            module_id,
            self.module[module_id].unwrapped(),
            self.config.get_config_for_module(module_id),
            rollouts,
            kwargs.get("minibatch_size"),
            max(1, kwargs.get("num_epochs") or 1),
        )
        return self.log_steps_once(list(self.rollout_minibatches(update)))

    def rollout_minibatches(self, update: BulkUpdate) -> Iterable[MultiAgentBatch]:
        """The minibatches of one update."""
        raise NotImplementedError


class FusedAdam:
    """Learner mixin: RLlib's Adam with torch's fused kernel, one call per step for all
    parameters instead of a loop over them. For small networks, whose update is mostly
    per-tensor overhead (MLP, LSTM): ~15% more learner steps/s on the 64x64 MLP on CPU. Memo's
    learner uses it on both paths (which still train bit for bit the same)."""

    def configure_optimizers_for_module(self, module_id: str, config: Any = None) -> None:
        params = self.get_parameters(self._module[module_id])
        self.register_optimizer(
            module_id=module_id,
            optimizer=torch.optim.Adam(params, fused=True),
            params=params,
            lr_or_lr_schedule=config.lr,
        )


class BulkPPOLearner(FusedAdam, RolloutLearner, PPOTorchLearner):
    """PPOTorchLearner that takes ``Rollout`` lists as its episodes; see the module docstring."""

    def rollout_minibatches(self, update: BulkUpdate) -> Iterable[MultiAgentBatch]:
        batch = rollout_batch(
            update.module,
            update.rollouts,
            gamma=update.config.gamma,
            lambda_=update.config.lambda_,
            device=self._device,
        )
        seed = (int(self.config.seed or 0), int(self._weights_seq_no))
        return flat_minibatches(
            update.module_id, batch, update.minibatch_size, update.num_epochs, seed=seed
        )


def rollouts_in(episodes: Any) -> list[Rollout] | None:
    """The rollouts in a (nested) list of samples; None if it holds anything else."""
    if not episodes:
        return None
    out: list[Rollout] = []
    stack = list(episodes)
    while stack:
        item = stack.pop(0)
        if isinstance(item, list | tuple):
            stack[:0] = list(item)
        elif isinstance(item, Rollout):
            out.append(item)
        else:
            return None
    return out


@torch.no_grad()
def rollout_batch(
    module: RLModule,
    rollouts: list[Rollout],
    *,
    gamma: float,
    lambda_: float,
    device: Any = None,
    standardize: bool = True,
) -> dict[str, torch.Tensor]:
    """The PPO train batch of some rollouts: (S,) rows over their S real env steps.

    Keys: OBS, ACTIONS, ACTION_LOGP, ACTION_DIST_INPUTS, ADVANTAGES (standardized over all S
    steps unless ``standardize`` is False), VALUE_TARGETS and VF_PREDS.
    """
    parts: dict[str, list[torch.Tensor]] = {}
    for ro in rollouts:

        def tensor(x: np.ndarray) -> torch.Tensor:
            return as_tensor(x, device)

        obs = tensor(ro.obs)  # (T + 1, N, *obs_shape)
        rows = obs.shape[0] * obs.shape[1]
        values = module.compute_values({Columns.OBS: obs.reshape(rows, *obs.shape[2:])})
        values = values.reshape(obs.shape[0], obs.shape[1])  # (T + 1, N)

        valid = tensor(ro.valid)
        advantages, targets = gae(
            values,
            tensor(ro.rewards),
            tensor(ro.terminated),
            tensor(ro.truncated),
            valid,
            gamma=gamma,
            lambda_=lambda_,
        )
        for key, value in (
            (Columns.OBS, obs[:-1]),
            (Columns.ACTIONS, tensor(ro.actions)),
            (Columns.ACTION_LOGP, tensor(ro.logp)),
            (Columns.ACTION_DIST_INPUTS, tensor(ro.dist_inputs)),
            (Postprocessing.ADVANTAGES, advantages),
            (Postprocessing.VALUE_TARGETS, targets),
            (Columns.VF_PREDS, values[:-1]),
        ):
            parts.setdefault(key, []).append(value[valid])
    batch = {key: torch.cat(value) for key, value in parts.items()}
    if standardize:
        adv = batch[Postprocessing.ADVANTAGES]
        std = adv.std(correction=0) if adv.numel() > 1 else adv.new_ones(())
        batch[Postprocessing.ADVANTAGES] = (adv - adv.mean()) / std.clamp(min=1e-4)
    return batch


def flat_minibatches(
    module_id: str,
    batch: dict[str, torch.Tensor],
    minibatch_size: int | None,
    num_epochs: int,
    seed: Any = 0,
) -> Iterator[MultiAgentBatch]:
    """``num_epochs`` shuffled passes over the batch's rows, each cut into nearly equal
    minibatches of about ``minibatch_size`` rows (None: the whole batch)."""
    size = len(batch[Columns.ACTIONS])
    count = max(1, round(size / minibatch_size)) if minibatch_size else 1
    rng = np.random.default_rng(seed)
    device = batch[Columns.ACTIONS].device
    for _ in range(max(1, num_epochs)):
        order = torch.from_numpy(rng.permutation(size)).to(device)
        for rows in torch.tensor_split(order, count):
            sub = {key: value[rows] for key, value in batch.items()}
            yield MultiAgentBatch({module_id: SampleBatch(sub)}, len(rows))
