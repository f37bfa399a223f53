"""``RecurrentBulkPPOLearner``: PPO on bulk rollouts for RLlib's stateful modules (its LSTM).

As RLlib's learner connectors do for episodes, each trial chunk of a rollout (an env's real steps
of one trial) is cut into sequences of ``max_seq_len`` steps, each starting from the recurrent
state its first step acted from (``state_in``, recurrent_runner.py); the loss backpropagates
through time within a sequence. GAE needs V(s_t) at every step and after each chunk's last one:
those come from one batched single-step pass from the stored states (the same values a pass
over the sequences gives, without the padding).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from memrl.rollout.arrays import Rollout, as_tensor
from memrl.rollout.gae import gae
from memrl.rollout.learner import BulkUpdate, FusedAdam, RolloutLearner
from memrl.rollout.recurrent_runner import STATE_IN, STATE_LAST


class RecurrentBulkPPOLearner(FusedAdam, RolloutLearner, PPOTorchLearner):
    """PPOTorchLearner that takes ``Rollout`` lists of a stateful module; see the module
    docstring."""

    def rollout_minibatches(self, update: BulkUpdate) -> Iterable[MultiAgentBatch]:
        batch = sequence_batch(
            update.module,
            update.rollouts,
            max_seq_len=int(update.module.model_config["max_seq_len"]),
            gamma=update.config.gamma,
            lambda_=update.config.lambda_,
            device=self._device,
        )
        rng = np.random.default_rng((int(self.config.seed or 0), int(self._weights_seq_no)))
        rows = len(batch[Columns.LOSS_MASK])
        steps = int(batch[Columns.LOSS_MASK].sum())
        count = min(rows, max(1, round(steps / (update.minibatch_size or steps))))
        for _ in range(update.num_epochs):
            for group in np.array_split(rng.permutation(rows), count):
                index = torch.from_numpy(group).to(self._device)
                sub = {
                    k: {s: x[index] for s, x in v.items()} if isinstance(v, dict) else v[index]
                    for k, v in batch.items()
                }
                env_steps = int(sub[Columns.LOSS_MASK].sum())
                yield MultiAgentBatch({update.module_id: SampleBatch(sub)}, env_steps)


def _single_step_values(module: Any, obs: torch.Tensor, state: dict[str, torch.Tensor]) -> Any:
    """V of (M, *obs_shape) observations, each from its own recurrent state (M, ...)."""
    out = module.compute_values({Columns.OBS: obs[:, None], Columns.STATE_IN: state})
    return out.reshape(-1)


@torch.no_grad()
def sequence_layout(rollout: Rollout, max_seq_len: int) -> dict[str, np.ndarray]:
    """(T, N) arrays: ``seq`` (the sequence of each real step, env-major), ``pos`` (its
    position in it), and ``first`` (the steps that start a sequence)."""
    valid = rollout.valid
    T, N = valid.shape
    chunk_start = valid.copy()
    chunk_start[1:] &= ~valid[:-1]
    rows = np.arange(T)[:, None]
    last_start = np.maximum.accumulate(np.where(chunk_start, rows, -1), axis=0)
    offset = rows - last_start  # steps since the chunk began
    first = valid & (offset % max_seq_len == 0)
    seq = (np.cumsum(first.T.ravel()) - 1).reshape(N, T).T
    return {"seq": seq, "pos": offset % max_seq_len, "first": first}


@torch.no_grad()
def recurrent_gae(
    module: Any, rollout: Rollout, *, gamma: float, lambda_: float, device: Any = None
) -> tuple[torch.Tensor, torch.Tensor, dict[str, np.ndarray]]:
    """(advantages, value_targets) (T, N) of a rollout, and its states {name: (T + 1, N, ...)}
    (the state each row acted from, then the state after the last row)."""
    T, N = rollout.valid.shape
    states = {
        k: np.concatenate([rollout.extras[STATE_IN][k], rollout.extras[STATE_LAST][k][None]])
        for k in rollout.extras[STATE_IN]
    }
    obs = as_tensor(rollout.obs, device)
    flat_state = {
        k: torch.from_numpy(v.reshape(-1, *v.shape[2:])).to(device) for k, v in states.items()
    }
    values = _single_step_values(module, obs.reshape(-1, *obs.shape[2:]), flat_state)
    adv, targets = gae(
        values.reshape(T + 1, N).float().cpu(),
        as_tensor(rollout.rewards),
        as_tensor(rollout.terminated),
        as_tensor(rollout.truncated),
        as_tensor(rollout.valid),
        gamma=gamma,
        lambda_=lambda_,
    )
    return adv, targets, states


@torch.no_grad()
def sequence_batch(
    module: Any,
    rollouts: list[Rollout],
    *,
    max_seq_len: int,
    gamma: float,
    lambda_: float,
    device: Any = None,
    standardize: bool = True,
) -> dict[str, Any]:
    """The (B, max_seq_len) train batch of some rollouts, with STATE_IN (B, ...) per sequence
    and advantages standardized over the real steps."""
    parts = []
    for ro in rollouts:
        adv, targets, states = recurrent_gae(
            module, ro, gamma=gamma, lambda_=lambda_, device=device
        )
        layout = sequence_layout(ro, max_seq_len)
        B = int(layout["first"].sum())
        t_idx, n_idx = np.nonzero(ro.valid)
        s, p = layout["seq"][t_idx, n_idx], layout["pos"][t_idx, n_idx]

        def lay(x: np.ndarray, B: int = B, s: Any = s, p: Any = p, t: Any = t_idx, n: Any = n_idx):
            out = np.zeros((B, max_seq_len, *x.shape[2:]), x.dtype)
            out[s, p] = x[t, n]
            return out

        tf, nf = np.nonzero(layout["first"])
        order = np.argsort(layout["seq"][tf, nf])
        tf, nf = tf[order], nf[order]
        parts.append(
            {
                Columns.OBS: lay(ro.obs[:-1]),
                Columns.ACTIONS: lay(ro.actions),
                Columns.ACTION_LOGP: lay(ro.logp),
                Columns.ACTION_DIST_INPUTS: lay(ro.dist_inputs),
                Columns.LOSS_MASK: lay(ro.valid),
                Postprocessing.ADVANTAGES: lay(adv.numpy()),
                Postprocessing.VALUE_TARGETS: lay(targets.numpy()),
                Columns.STATE_IN: {k: v[tf, nf] for k, v in states.items()},
            }
        )
    batch: dict[str, Any] = {}
    for key in parts[0]:
        if key == Columns.STATE_IN:
            batch[key] = {
                k: torch.from_numpy(np.concatenate([p[key][k] for p in parts])).to(device)
                for k in parts[0][key]
            }
        else:
            batch[key] = torch.from_numpy(np.concatenate([p[key] for p in parts])).to(device)
    mask = batch[Columns.LOSS_MASK]
    if standardize:
        adv = batch[Postprocessing.ADVANTAGES]
        sel = adv[mask]
        std = sel.std(correction=0) if sel.numel() > 1 else sel.new_ones(())
        batch[Postprocessing.ADVANTAGES] = torch.where(
            mask, (adv - sel.mean()) / std.clamp(min=1e-4), torch.zeros_like(adv)
        )
    return batch
