"""Memo's learner on bulk rollouts: (T, N) arrays -> whole-trial (B, T') rows in array operations.

``MemoBulkLearner`` is ``MemoPPOLearner`` (same loss, same row minibatches) fed by
``trial_rows`` instead of the ``MemoTrialBatch`` connector. Each trial chunk of a rollout (an
env's consecutive real steps of one trial) becomes one row from its trial's first step: the
context before the rollout comes from ``memo_prefix_obs``, the chunk's steps sit at their trial
steps (``Rollout.trial_t``), and the observation after its last step (the next one, or the
trial's final one on the reset row) closes the row for the bootstrap value. Values come from one
no-grad pass over the rows (``rollout_values``); GAE runs on the (T, N) arrays
(``memrl.rollout.gae``) and its results are scattered back into the rows, where the loss mask
covers the chunk's own steps.

A rollout acted by older weights than the learner's (``ACTED_BEHIND``: overlapped sampling, one
version behind) is trained with decoupled PPO (Hilton et al., 2021, "Batch size-invariance for
policy optimization"): the same pass also gives the learner's own log-probs before the update
(pi_prox), the ratio is clipped around them instead of around the acting policy's, and each
step's surrogate is weighted by pi_prox(a) / pi_behaviour(a) (``BEHAVIOUR_WEIGHTS``). Clipped
around a policy the learner has already moved away from, PPO would zero the gradient of many
steps before the first minibatch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.policy.sample_batch import MultiAgentBatch

from memrl.methods.memo.columns import BEHAVIOUR_WEIGHTS, MEMO_PREFIX_OBS, MEMO_SEG_LEN
from memrl.methods.memo.learner import MemoPPOLearner, _distributed, row_minibatches
from memrl.rollout.arrays import ACTED_BEHIND, Rollout, as_tensor
from memrl.rollout.gae import gae
from memrl.rollout.learner import BulkUpdate, RolloutLearner


class MemoBulkLearner(RolloutLearner, MemoPPOLearner):
    """MemoPPOLearner that also takes ``Rollout`` lists; see the module docstring."""

    corrects_acting_lag = True
    """Trains rollouts marked ``ACTED_BEHIND`` with decoupled PPO (overlapped sampling)."""

    def rollout_minibatches(self, update: BulkUpdate) -> Iterable[MultiAgentBatch]:
        batch = memo_rollout_batch(
            update.module,
            update.rollouts,
            gamma=update.config.gamma,
            lambda_=update.config.lambda_,
            device=self._device,
        )
        env_steps = sum(len(r) for r in update.rollouts)
        minibatches = list(
            row_minibatches(
                {update.module_id: batch},
                update.minibatch_size or env_steps,
                update.num_epochs,
                env_steps,
                seed=int(self._weights_seq_no),
                same_count=_distributed(),
            )
        )
        self._memo_start_update(len(minibatches))
        return minibatches


def trial_rows(rollout: Rollout) -> dict[str, Any]:
    """The row layout of a rollout's trial chunks (numpy, no values yet).

    Returns:
        ``obs`` (B, T', *obs_shape) from each trial's first step; ``actions``, ``logp``
        (B, T'), ``dist`` (B, T', D) and ``mask`` (B, T') on the chunks' own steps; and the
        layout: ``row`` / ``step`` (T, N), the row and trial step of every real step, and
        ``end`` (T, N), the steps that close a row (their next observation is the row's last).
    """
    valid = rollout.valid
    T, N = valid.shape
    step = rollout.trial_t.astype(np.int64)
    starts = valid.copy()
    starts[1:] &= ~valid[:-1]  # a real step after a reset row (or the rollout's first row)
    done = rollout.terminated | rollout.truncated
    end = valid & done
    end[-1] |= valid[-1]
    # Rows in env-major order: the cumulative count of starts up to (n, t), minus one.
    row = (np.cumsum(starts.T.ravel()) - 1).reshape(N, T).T  # (T, N)
    B = int(starts.sum())
    width = int((step[end] + 2).max()) if B else 1
    obs_shape = rollout.obs.shape[2:]
    obs = np.zeros((B, width, *obs_shape), rollout.obs.dtype)
    t_idx, n_idx = np.nonzero(valid)
    r, s = row[t_idx, n_idx], step[t_idx, n_idx]
    obs[r, s] = rollout.obs[t_idx, n_idx]
    te, ne = np.nonzero(end)
    obs[row[te, ne], step[te, ne] + 1] = rollout.obs[te + 1, ne]
    # Context before the rollout: rows that start at row 0 mid-trial.
    prefix = rollout.extras.get(MEMO_PREFIX_OBS)
    first = np.flatnonzero(valid[0] & (step[0] > 0))
    if len(first):
        if prefix is None or prefix.shape[1] < int(step[0, first].max()):
            raise ValueError("a Memo rollout starts mid-trial without its trial's observations")
        ii, kk = np.nonzero(np.arange(prefix.shape[1])[None, :] < step[0, first][:, None])
        obs[row[0, first[ii]], kk] = prefix[first[ii], kk]
    actions = np.zeros((B, width, *rollout.actions.shape[2:]), rollout.actions.dtype)
    logp = np.zeros((B, width), np.float32)
    dist = np.zeros((B, width, rollout.dist_inputs.shape[-1]), np.float32)
    mask = np.zeros((B, width), bool)
    actions[r, s] = rollout.actions[t_idx, n_idx]
    logp[r, s] = rollout.logp[t_idx, n_idx]
    dist[r, s] = rollout.dist_inputs[t_idx, n_idx]
    mask[r, s] = True
    return {
        "obs": obs,
        "actions": actions,
        "logp": logp,
        "dist": dist,
        "mask": mask,
        "row": row,
        "step": step,
        "end": end,
    }


@torch.no_grad()
def rollout_values(
    module: Any, rollout: Rollout, rows: dict[str, Any], device: Any = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Values of a rollout's observations from one no-grad pass of ``module`` over its
    ``trial_rows``, and, for a rollout acted behind, the module's log-probs of the actions taken.

    Returns:
        (T + 1, N) float32 values in return units: row t of env n holds the value of
        ``obs[t, n]`` in its trial's context; where a row closes (``rows["end"]``) the next row
        holds the value of the observation after it, the bootstrap (the reset row's, or row
        T's). And (B, T') float32 log-probs in the row layout (None unless ``ACTED_BEHIND``).
    """
    seg = int(rollout.extras.get(MEMO_SEG_LEN) or module.memo_cfg.l_seg)
    B = rows["mask"].shape[0]
    obs = torch.from_numpy(rows["obs"]).to(device)
    seg_rows = torch.full((B,), seg, dtype=torch.long, device=device)
    values, logits = module.values_and_logits({Columns.OBS: obs, MEMO_SEG_LEN: seg_rows})
    logp = None
    if rollout.extras.get(ACTED_BEHIND):
        dist = module.get_train_action_dist_cls().from_logits(logits)  # (B, T', A)
        logp = dist.logp(torch.from_numpy(rows["actions"]).to(device)).float().cpu().numpy()
    values = values.float().cpu().numpy()  # (B, T')
    valid, row, step, end = rollout.valid, rows["row"], rows["step"], rows["end"]
    values_tn = np.zeros((rollout.num_steps + 1, rollout.num_envs), np.float32)
    values_tn[:-1][valid] = values[row[valid], step[valid]]
    te, ne = np.nonzero(end)
    values_tn[te + 1, ne] = values[row[te, ne], step[te, ne] + 1]
    return values_tn, logp


@torch.no_grad()
def memo_rollout_batch(
    module: Any,
    rollouts: list[Rollout],
    *,
    gamma: float,
    lambda_: float,
    device: Any = None,
    update_value_norm: bool = True,
) -> dict[str, torch.Tensor]:
    """Memo's (B, T') train batch of some rollouts (the columns ``MemoTrialBatch`` makes);
    ``update_value_norm``: move the critic's value normalization to the new targets, as the
    connector does before the loss reads them."""
    parts = []
    for ro in rollouts:
        rows = trial_rows(ro)
        seg = int(ro.extras.get(MEMO_SEG_LEN) or module.memo_cfg.l_seg)
        B, width = rows["mask"].shape
        values_tn, prox_logp = rollout_values(module, ro, rows, device)
        # Decoupled PPO for a rollout acted behind: clip around the learner's own policy.
        behaviour = np.ones((B, width), np.float32)
        if prox_logp is not None:
            mask = rows["mask"]
            behaviour[mask] = np.exp(prox_logp[mask] - rows["logp"][mask])
            rows["logp"] = np.where(mask, prox_logp, rows["logp"]).astype(np.float32)
        valid, row, step = ro.valid, rows["row"], rows["step"]
        adv_tn, targets_tn = gae(
            torch.from_numpy(values_tn),
            as_tensor(ro.rewards),
            as_tensor(ro.terminated),
            as_tensor(ro.truncated),
            as_tensor(valid),
            gamma=gamma,
            lambda_=lambda_,
        )
        adv = np.zeros((B, width), np.float32)
        targets = np.zeros((B, width), np.float32)
        adv[row[valid], step[valid]] = adv_tn.numpy()[valid]
        targets[row[valid], step[valid]] = targets_tn.numpy()[valid]
        parts.append(
            {
                **rows,
                "adv": adv,
                "targets": targets,
                "seg": np.full(B, seg, np.int64),
                "behaviour": behaviour,
            }
        )
    width = max(p["mask"].shape[1] for p in parts)

    def cat(key: str) -> np.ndarray:
        padded = []
        for p in parts:
            x = p[key]
            if x.ndim >= 2 and x.shape[1] < width:
                pad = [(0, 0), (0, width - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
                x = np.pad(x, pad)
            padded.append(x)
        return np.concatenate(padded)

    mask = cat("mask")
    adv, targets = cat("adv"), cat("targets")
    sel = adv[mask]
    adv[mask] = (sel - sel.mean()) / max(float(sel.std()), 1e-4)
    if update_value_norm:
        module.vf.update(torch.from_numpy(targets[mask]).to(device))
    data = {
        Columns.OBS: cat("obs"),
        Columns.ACTIONS: cat("actions"),
        Columns.ACTION_LOGP: cat("logp"),
        Columns.ACTION_DIST_INPUTS: cat("dist"),
        Columns.LOSS_MASK: mask,
        Postprocessing.ADVANTAGES: adv,
        Postprocessing.VALUE_TARGETS: targets,
        MEMO_SEG_LEN: cat("seg"),
    }
    if any(ro.extras.get(ACTED_BEHIND) for ro in rollouts):
        data[BEHAVIOUR_WEIGHTS] = cat("behaviour")
    return {k: torch.from_numpy(v).to(device) for k, v in data.items()}
