"""Learner connector of Memo: episode chunks -> (B, T) whole-trial rows with GAE on the new steps.

Each sampled chunk of a trial arrives with its trial's earlier observations in the lookback buffer
(``episode_lookback_horizon`` >= the trial length). Row i of the train batch is the trial from its
first step to the chunk's last observation; the loss mask covers only the chunk's own steps. So a
trial trained over several iterations gets the paper's partial updates (the loss on the new steps,
the context and gradients through every summary since the trial began), and a whole trial sampled
at once is one row.

Values for GAE come from one no-grad forward over the rows with the segment length each chunk was
acted with (``memo_seg_len``); the last observation of a chunk gives the
bootstrap value unless the trial terminated there. Advantages are standardized over the loss
steps, as RLlib's GeneralAdvantageEstimation does. The value targets then update the critic's
value normalization (``PopArtHead.update``) before the loss uses them.

With a frozen image encoder (``module.visual``), the features the env runner computed for each
step are in the episode as the extra model output ``memo_frozen_features`` (lookback included);
they become the batch column of that name, so the learner never re-encodes those images. Only
the chunk's last observation (the bootstrap one, not acted on yet) is encoded here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from ray.rllib.evaluation.postprocessing import Postprocessing

from memrl.methods.memo.columns import MEMO_FROZEN_FEATURES, MEMO_SEG_LEN


class MemoTrialBatch(ConnectorV2):
    """Builds the Memo train batch from episode chunks (replaces RLlib's default pipeline)."""

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        gamma: float = 0.99,
        lambda_: float = 0.95,
        **kwargs: Any,
    ) -> None:
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.gamma = gamma
        self.lambda_ = lambda_

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
        module = rl_module[DEFAULT_MODULE_ID] if isinstance(rl_module, MultiRLModule) else rl_module
        module = module.unwrapped() if hasattr(module, "unwrapped") else module  # DDP wrapper
        episodes = [e for e in episodes if len(e) > 0]
        rows = [trial_row(e) for e in episodes]
        if not rows:
            return batch
        T = max(len(r["obs"]) for r in rows)
        B = len(rows)
        obs_dim = rows[0]["obs"].shape[1]
        n_dist = rows[0]["dist"].shape[1]
        visual = getattr(module, "visual", None)
        obs = np.zeros((B, T, obs_dim), np.float32)
        actions = np.zeros((B, T), np.int64)
        logp = np.zeros((B, T), np.float32)
        dist = np.zeros((B, T, n_dist), np.float32)
        mask = np.zeros((B, T), bool)
        for i, r in enumerate(rows):
            t0, n = r["t0"], len(r["actions"])
            obs[i, : len(r["obs"])] = r["obs"]
            actions[i, t0 : t0 + n] = r["actions"]
            logp[i, t0 : t0 + n] = r["logp"]
            dist[i, t0 : t0 + n] = r["dist"]
            mask[i, t0 : t0 + n] = True
        device = next(module.parameters()).device
        frozen = None
        if visual is not None:
            frozen = np.zeros((B, T, visual.features), np.float32)
            for i, r in enumerate(rows):
                frozen[i, : len(r["obs"])] = frozen_features(module, r["obs"], r["frozen"])
        seg = np.array([r["seg"] or module.memo_cfg.l_seg for r in rows], np.int64)
        columns = {
            Columns.OBS: torch.from_numpy(obs).to(device),
            MEMO_SEG_LEN: torch.from_numpy(seg).to(device),
        }
        if frozen is not None:
            columns[MEMO_FROZEN_FEATURES] = torch.from_numpy(frozen).to(device)
        with torch.no_grad():
            values = module.compute_values(columns).cpu().numpy()  # (B, T)
        adv = np.zeros((B, T), np.float32)
        targets = np.zeros((B, T), np.float32)
        for i, r in enumerate(rows):
            t0, n = r["t0"], len(r["actions"])
            v = values[i, t0 : t0 + n + 1].copy()
            if r["terminated"]:
                v[-1] = 0.0
            a = gae(r["rewards"], v, self.gamma, self.lambda_)
            adv[i, t0 : t0 + n] = a
            targets[i, t0 : t0 + n] = a + v[:-1]
        sel = adv[mask]
        adv[mask] = (sel - sel.mean()) / max(float(sel.std()), 1e-4)
        module.vf.update(torch.from_numpy(targets[mask]).to(device))
        data = {
            Columns.OBS: obs,
            Columns.ACTIONS: actions,
            Columns.ACTION_LOGP: logp,
            Columns.ACTION_DIST_INPUTS: dist,
            Columns.LOSS_MASK: mask,
            Postprocessing.ADVANTAGES: adv,
            Postprocessing.VALUE_TARGETS: targets,
            MEMO_SEG_LEN: seg,
        }
        if frozen is not None:
            data[MEMO_FROZEN_FEATURES] = frozen
        batch[DEFAULT_MODULE_ID] = {k: torch.from_numpy(v).to(device) for k, v in data.items()}
        return batch


def trial_row(episode: Any) -> dict[str, Any]:
    """One chunk's trial-so-far: observations from trial step 0 and the chunk's own steps.

    Raises:
        ValueError: the lookback buffer does not reach back to the trial's first step.
    """
    t0 = episode.t_started
    lookback = episode.observations.lookback
    if lookback < t0:
        raise ValueError(
            f"Memo needs each chunk's trial from its first step, but a chunk starting at trial "
            f"step {t0} carries only {lookback} earlier observations. Set model.max_trial_len "
            f"to at least the env's trial length (episode_lookback_horizon follows it)."
        )
    all_obs = np.asarray(episode.observations.data, dtype=np.float32)
    frozen = None
    if MEMO_FROZEN_FEATURES in episode.extra_model_outputs:
        buf = episode.extra_model_outputs[MEMO_FROZEN_FEATURES]
        if buf.lookback >= t0:
            frozen = np.asarray(buf.data, dtype=np.float32)[buf.lookback - t0 :]  # (t0 + len, F)
    seg = None
    if MEMO_SEG_LEN in episode.extra_model_outputs:
        used = np.unique(np.asarray(episode.get_extra_model_outputs(MEMO_SEG_LEN)))
        if len(used) > 1:
            raise ValueError(f"one sampled Memo chunk was acted with segment lengths {used}")
        seg = int(used[0]) if len(used) else None
    return {
        "t0": t0,
        "seg": seg,
        "obs": all_obs[lookback - t0 :],  # (t0 + len + 1, obs_dim)
        "frozen": frozen,
        "actions": np.asarray(episode.get_actions()),
        "logp": np.asarray(episode.get_extra_model_outputs(Columns.ACTION_LOGP), np.float32),
        "dist": np.asarray(episode.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS), np.float32),
        "rewards": np.asarray(episode.get_rewards(), np.float32),
        "terminated": bool(episode.is_terminated),
    }


def frozen_features(module: Any, obs: np.ndarray, stored: np.ndarray | None) -> np.ndarray:
    """(T, F) frozen image features of a row: the stored ones, the missing tail encoded now.

    Args:
        module: a MemoRLModule with a frozen image encoder.
        obs: (T, obs_dim) the row's observations.
        stored: (S, F), S <= T, the features the env runner kept for the first S steps, or None.
    """
    n = 0 if stored is None else min(len(stored), len(obs))
    if n == len(obs):
        return stored[:n]
    tail = module.image_features(torch.from_numpy(np.ascontiguousarray(obs[n:]))).cpu().numpy()
    return tail if n == 0 else np.concatenate([stored[:n], tail])


def gae(rewards: np.ndarray, values: np.ndarray, gamma: float, lambda_: float) -> np.ndarray:
    """Generalized advantage estimates; values has one more entry (the bootstrap) than rewards."""
    adv = np.zeros(len(rewards), np.float32)
    last = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        delta = rewards[t] + gamma * values[t + 1] - values[t]
        last = delta + gamma * lambda_ * last
        adv[t] = last
    return adv


def make_learner_connector(
    input_observation_space: Any = None,
    input_action_space: Any = None,
    *,
    gamma: float = 0.99,
    lambda_: float = 0.95,
) -> MemoTrialBatch:
    """``AlgorithmConfig.learners(learner_connector=...)`` factory (bind gamma/lambda_ first)."""
    return MemoTrialBatch(input_observation_space, input_action_space, gamma=gamma, lambda_=lambda_)
