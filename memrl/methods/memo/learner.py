"""PPO learner for Memo: minibatches of whole-trial rows, a normalized critic, and diagnostics.

RLlib's MiniBatchCyclicIterator slices a batch by timesteps (or by max_seq_len sequences for
stateful modules). Memo's rows are trials from their first step (see batch.py), which must stay
whole. This learner shuffles rows every epoch and packs them into minibatches of about
``minibatch_size`` loss steps, each trimmed to its longest row. With several learners (DDP) every
learner makes the same number of minibatches (the smallest any of them can fill), so none waits
for a gradient all-reduce that never comes.

The loss is PPO's clipped surrogate, masked by LOSS_MASK, with the value loss in the critic's
normalized units (``PopArtHead``): ``pg_loss + vf_loss_coeff * min(vf_err^2, vf_clip_param) -
entropy_coeff * entropy`` (+ the adaptive KL term with ``use_kl_loss``). Logged per update, next to
RLlib's PPO keys:

- ``vf_explained_var`` over every loss step (RLlib's own helper reads only dim 0 of a (B, T)
  batch, i.e. trial step 0), and ``vf_ev_q1`` .. ``vf_ev_q4`` by quarter of the trial;
- ``ratio_dev_pre_update`` / ``clip_frac_pre_update``: max |ratio - 1| and the clipped fraction on
  the first minibatch, before any gradient step (0 when acting and learning compute the same);
- ``trunk_grad_norm_pi`` / ``trunk_grad_norm_vf``: the policy and value terms' gradient norms on
  the shared trunk (encoder + transformer), first minibatch, one learner only, every
  ``grad_diagnostics_every`` updates (the model setting; two extra backward passes each time);
- ``clip_frac``, ``approx_kl``, ``value_mean``, ``target_mean``, ``value_norm_std``.

As for RLlib's PPO keys, the logged value is the update's last minibatch's (RLlib keeps the last
of window-1 values), so these are computed on the last minibatch only (and the first, for the
pre-update ones). Adam runs torch's fused kernel (``FusedAdam``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from ray.rllib.algorithms.ppo.ppo import (
    LEARNER_RESULTS_KL_KEY,
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
)
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from memrl.methods.memo.columns import BEHAVIOUR_WEIGHTS, VF_PREDS
from memrl.methods.ppo_math import approx_kl, clipped_surrogate_loss, masked_mean
from memrl.rollout.learner import FusedAdam

GRAD_DIAGNOSTICS_EVERY = "memo_grad_diagnostics_every"
"""learner_config_dict key: updates between two trunk gradient-norm logs (0: never)."""


class MemoPPOLearner(FusedAdam, PPOTorchLearner):
    """PPOTorchLearner whose minibatches are whole (B, T) trial rows; see the module docstring."""

    _memo_first_minibatch = False
    _memo_minibatches_left = 0
    _memo_grad_diagnostics = False
    _memo_updates = 0

    def _memo_start_update(self, minibatches: int) -> None:
        """Marks the next minibatch as an update's first and the ``minibatches``-th as its last,
        and decides whether this update logs the trunk gradient norms (the first update, then
        every ``grad_diagnostics_every``)."""
        every = int(self.config.learner_config_dict.get(GRAD_DIAGNOSTICS_EVERY, 1))
        self._memo_first_minibatch = True
        self._memo_minibatches_left = minibatches
        self._memo_grad_diagnostics = every > 0 and self._memo_updates % every == 0
        self._memo_updates += 1

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
        minibatches = list(
            row_minibatches(
                batch,
                minibatch_size or env_steps,
                num_epochs,
                env_steps,
                seed=int(self._weights_seq_no),
                same_count=_distributed(),
            )
        )
        self._memo_start_update(len(minibatches))
        return minibatches

    def compute_loss_for_module(
        self, *, module_id: str, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]
    ) -> torch.Tensor:
        module = self.module[module_id].unwrapped()
        mask = batch[Columns.LOSS_MASK]

        def mean(x: torch.Tensor) -> torch.Tensor:
            return masked_mean(x, mask)

        dist_cls = module.get_train_action_dist_cls()
        curr = dist_cls.from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
        logp = curr.logp(batch[Columns.ACTIONS])
        v_norm = fwd_out[VF_PREDS]
        targets = batch[Postprocessing.VALUE_TARGETS]
        entropy = curr.entropy()
        clip = config.clip_param
        terms = ppo_terms(
            logp,
            batch[Columns.ACTION_LOGP],
            batch[Postprocessing.ADVANTAGES],
            v_norm,
            module.vf.normalize(targets),
            entropy,
            mask,
            clip=clip,
            vf_clip=config.vf_clip_param,
            vf_coeff=config.vf_loss_coeff,
            entropy_coeff=self.entropy_coeff_schedulers_per_module[module_id].get_current_value(),
            behaviour_weights=batch.get(BEHAVIOUR_WEIGHTS),
        )
        total, ratio = terms["total"], terms["ratio"]
        pg_loss, vf_loss, vf_err = terms["pg_loss"], terms["vf_loss"], terms["vf_err"]
        if config.use_kl_loss:
            prev = module.get_exploration_action_dist_cls().from_logits(
                batch[Columns.ACTION_DIST_INPUTS]
            )
            kl = mean(prev.kl(curr))
            total = total + self.curr_kl_coeffs_per_module[module_id] * kl
        else:
            kl = torch.zeros((), device=total.device)
        first = self._memo_first_minibatch
        self._memo_first_minibatch = False
        self._memo_minibatches_left -= 1
        if not first and self._memo_minibatches_left > 0:
            # RLlib keeps an update's last logged value (window 1): the statistics of the
            # minibatches between the first and the last would be dropped unread.
            return total

        with torch.no_grad():
            values = module.vf.denormalize(v_norm)
            dev = (ratio - 1).abs()
            stats = {
                POLICY_LOSS_KEY: mean(pg_loss),
                VF_LOSS_KEY: mean(vf_loss),
                LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY: mean(vf_err),
                ENTROPY_KEY: mean(entropy),
                LEARNER_RESULTS_KL_KEY: kl,
                "clip_frac": mean((dev > clip).float()),
                "approx_kl": mean(approx_kl(logp - batch[Columns.ACTION_LOGP])),
                "value_mean": mean(values),
                "target_mean": mean(targets),
                "value_norm_std": module.vf.stats()[1],
                LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(targets, values, mask),
            }
            T = mask.shape[1]
            for q in range(4):
                part = torch.zeros_like(mask)
                part[:, q * T // 4 : (q + 1) * T // 4] = True
                stats[f"vf_ev_q{q + 1}"] = explained_variance(targets, values, mask & part)
        if first:
            stats["ratio_dev_pre_update"] = (dev * mask).max().detach()
            stats["clip_frac_pre_update"] = stats["clip_frac"]
            if self._memo_grad_diagnostics and module.critic == "shared" and not _distributed():
                trunk = [*module.encoder.parameters(), *module.net.parameters()]
                stats["trunk_grad_norm_pi"] = _grad_norm(mean(pg_loss), trunk)
                stats["trunk_grad_norm_vf"] = _grad_norm(
                    config.vf_loss_coeff * mean(vf_loss), trunk
                )
        self.metrics.log_dict(
            {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in stats.items()},
            key=module_id,
            window=1,
        )
        return total


def ppo_terms(
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    targets: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float,
    vf_clip: float,
    vf_coeff: float,
    entropy_coeff: float,
    behaviour_weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """PPO's loss on (B, T) steps, averaged over the ``mask``ed ones.

    ``values`` and ``targets`` are in the same (normalized) units. ``behaviour_weights``
    (decoupled PPO, for steps acted by older weights): ``behaviour_logp`` is then the learner's
    own policy before the update, and each step's surrogate is weighted by pi_prox(a) /
    pi_behaviour(a). Returns ``total`` (the scalar to minimize) and the per-step ``ratio``,
    ``pg_loss`` (the negated clipped surrogate), ``vf_err`` (squared value error) and
    ``vf_loss`` (that error clipped at ``vf_clip``).
    """
    ratio = torch.exp(logp - behaviour_logp)
    pg_loss = clipped_surrogate_loss(ratio, advantages, clip)
    if behaviour_weights is not None:
        pg_loss = pg_loss * behaviour_weights
    vf_err = (values - targets) ** 2
    vf_loss = vf_err.clamp(max=vf_clip)
    per_step = pg_loss + vf_coeff * vf_loss - entropy_coeff * entropy
    total = masked_mean(per_step, mask)
    return {
        "total": total,
        "ratio": ratio,
        "pg_loss": pg_loss,
        "vf_err": vf_err,
        "vf_loss": vf_loss,
    }


def explained_variance(
    targets: torch.Tensor, preds: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """1 - Var(targets - preds) / Var(targets) over the masked entries (nan if fewer than 2)."""
    y, e = targets[mask], (targets - preds)[mask]
    if y.numel() < 2:
        return torch.tensor(math.nan, device=targets.device)
    var = y.var()
    return torch.where(var > 0, 1 - e.var() / var, torch.nan)


def _grad_norm(loss: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return torch.sqrt(sum((g.detach() ** 2).sum() for g in grads if g is not None))


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


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
    same_count: bool = False,
) -> Iterator[MultiAgentBatch]:
    """Yields MultiAgentBatches of whole rows with about ``minibatch_size`` loss steps each.

    ``same_count``: every learner of a torch.distributed group yields the same number of
    minibatches per epoch (the fewest any learner can fill, at least one row each).
    """
    rng = np.random.default_rng(seed)
    for mid, data in batch.items():
        steps = data[Columns.LOSS_MASK].sum(dim=1).cpu().numpy()
        count = max(1, math.ceil(steps.sum() / max(minibatch_size, 1)))
        count = min(count, len(steps))
        if same_count:
            # On the batch's device: NCCL (GPU learners) reduces CUDA tensors only.
            shared = torch.tensor([count], dtype=torch.long, device=data[Columns.LOSS_MASK].device)
            dist.all_reduce(shared, op=dist.ReduceOp.MIN)
            count = int(shared)
        for _ in range(num_epochs):
            order = rng.permutation(len(steps))
            for group in _split(order, count):
                yield _rows(mid, data, group.tolist(), env_steps)


def _split(order: np.ndarray, count: int) -> list[np.ndarray]:
    """``order`` cut into ``count`` consecutive groups of (nearly) equal numbers of rows."""
    return [group for group in np.array_split(order, count) if len(group)]


def _rows(
    mid: str, data: dict[str, torch.Tensor], rows: list[int], env_steps: int
) -> MultiAgentBatch:
    index = torch.tensor(rows, device=data[Columns.LOSS_MASK].device)
    mask = data[Columns.LOSS_MASK][index]
    # Rows keep their first steps (the context); trim only the shared padding at the end.
    seen = mask.any(dim=0).nonzero()
    t_end = int(seen.max()) + 1 if len(seen) else mask.shape[1]
    sub = {k: v[index] if v.dim() == 1 else v[index][:, :t_end] for k, v in data.items()}
    return MultiAgentBatch({mid: SampleBatch(sub)}, env_steps)
