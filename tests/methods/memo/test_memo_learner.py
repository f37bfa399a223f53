"""``MemoPPOLearner.compute_loss_for_module`` built for real (RLlib's build_learner, no Ray):
the whole loss against the PPO terms worked out here, with the critic's statistics moved away
from the identity and with stored action distributions that differ from the current ones."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from ray.rllib.algorithms.ppo.ppo import LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing

from memrl.experiment.build import build_algorithm_config
from memrl.experiment.config import parse_config
from memrl.methods.memo.columns import MEMO_SEG_LEN, VF_PREDS
from memrl.methods.memo.learner import ppo_terms

torch.set_num_threads(1)  # small shared machines: one thread per test process

ENV = {"id": "memrl/MemoryCorridor-v0", "config": {"length": 4}}
MODEL = {
    "type": "memo", "d_model": 16, "n_layers": 1, "n_heads": 2, "l_seg": 4, "l_sum": 2,
    "encoder_hiddens": [16],
}  # fmt: skip


def _learner(**algorithm):
    exp = parse_config(
        {
            "env": ENV,
            "algorithm": {"name": "ppo", "vf_clip_param": 10.0, **algorithm},
            "model": MODEL,
            "resources": {"num_env_runners": 0},
        }
    )
    env = gym.make(ENV["id"], **ENV["config"])
    spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
    return build_algorithm_config(exp).build_learner(spaces=spaces)


def _batch(learner, seed: int = 0) -> dict[str, torch.Tensor]:
    """Three rows of 9 steps: a lookback prefix off the loss on row 0, padding on rows 1 and 2,
    value targets around 12 (far from the critic's initial units), random stored logits."""
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    g = torch.Generator().manual_seed(seed)
    B, T = 3, 9
    obs_dim = module.observation_space.shape[0]
    n = module.action_space.n
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[0, 3:], mask[1, :6], mask[2, :4] = True, True, True
    return {
        Columns.OBS: torch.rand(B, T, obs_dim, generator=g),
        Columns.ACTIONS: torch.randint(0, n, (B, T), generator=g),
        Columns.ACTION_LOGP: -torch.rand(B, T, generator=g) - 0.5,
        Columns.ACTION_DIST_INPUTS: torch.randn(B, T, n, generator=g),
        Columns.LOSS_MASK: mask,
        Postprocessing.ADVANTAGES: torch.randn(B, T, generator=g) * mask,
        Postprocessing.VALUE_TARGETS: (12.0 + 5.0 * torch.randn(B, T, generator=g)) * mask,
        MEMO_SEG_LEN: torch.full((B,), 4),
    }


def _loss(learner, batch):
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    fwd = module.forward_train(batch)
    config = learner.config.get_config_for_module(DEFAULT_MODULE_ID)
    loss = learner.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID, config=config, batch=batch, fwd_out=fwd
    )
    return loss, fwd, config


def _ppo_total(batch, fwd, config, targets) -> torch.Tensor:
    """PPO's loss (``ppo_terms``, tested on hand-made numbers) with the given value targets."""
    current = torch.distributions.Categorical(logits=fwd[Columns.ACTION_DIST_INPUTS])
    return ppo_terms(
        current.log_prob(batch[Columns.ACTIONS]),
        batch[Columns.ACTION_LOGP],
        batch[Postprocessing.ADVANTAGES],
        fwd[VF_PREDS],
        targets,
        current.entropy(),
        batch[Columns.LOSS_MASK],
        clip=config.clip_param,
        vf_clip=config.vf_clip_param,
        vf_coeff=config.vf_loss_coeff,
        entropy_coeff=config.entropy_coeff,
    )["total"]


def test_value_loss_compares_normalized_values_with_normalized_targets():
    """With value normalization (the default) and its statistics moved to the batch's targets,
    the critic's normalized output is compared with (target - mean) / std."""
    learner = _learner()
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    batch = _batch(learner)
    mask = batch[Columns.LOSS_MASK]
    targets = batch[Postprocessing.VALUE_TARGETS]
    module.vf.update(targets[mask])  # the first update: the statistics are the batch's own
    mean, std = targets[mask].mean(), targets[mask].std(unbiased=False)
    assert float(mean) > 8 and float(std) > 3  # far from the identity (0, 1)
    loss, fwd, config = _loss(learner, batch)
    with torch.no_grad():
        want = _ppo_total(batch, fwd, config, (targets - mean) / std)
        raw = _ppo_total(batch, fwd, config, targets)
    assert loss.item() == pytest.approx(float(want), rel=1e-5)
    assert abs(float(raw) - float(want)) > 1.0  # normalizing matters here: the test can fail


@pytest.mark.parametrize("kl_coeff", [0.3, 2.0])
def test_kl_term_adds_the_coefficient_times_kl_from_the_stored_distribution(kl_coeff):
    """With use_kl_loss, the loss is PPO's plus kl_coeff x KL(stored || current), averaged over
    the loss mask; the stored logits differ from the current ones, so the KL is not zero."""
    learner = _learner(use_kl_loss=True, kl_coeff=kl_coeff)
    batch = _batch(learner, seed=1)
    mask = batch[Columns.LOSS_MASK]
    loss, fwd, config = _loss(learner, batch)
    with torch.no_grad():
        ppo = _ppo_total(batch, fwd, config, batch[Postprocessing.VALUE_TARGETS])
        old = torch.log_softmax(batch[Columns.ACTION_DIST_INPUTS], -1)
        new = torch.log_softmax(fwd[Columns.ACTION_DIST_INPUTS], -1)
        kl = (old.exp() * (old - new)).sum(-1)  # (B, T)
        kl_mean = (kl * mask).sum() / mask.sum()
        reverse = ((new.exp() * (new - old)).sum(-1) * mask).sum() / mask.sum()
    assert float(kl_mean) > 0.1 and abs(float(reverse) - float(kl_mean)) > 1e-2
    assert loss.item() == pytest.approx(float(ppo + kl_coeff * kl_mean), rel=1e-5)


def test_explained_variance_compares_targets_with_values_in_return_units():
    """``vf_explained_var`` is 1 - Var(targets - V) / Var(targets) with V the critic's values in
    return units (de-normalized), not its normalized output: targets close to V, with the
    normalizer's statistics far from the identity, give a value near 1."""
    learner = _learner()
    module = learner.module[DEFAULT_MODULE_ID].unwrapped()
    batch = _batch(learner)
    mask = batch[Columns.LOSS_MASK]
    module.vf.update(batch[Postprocessing.VALUE_TARGETS][mask])  # mean ~12, std ~5
    with torch.no_grad():
        values = module.vf.denormalize(module.forward_train(batch)[VF_PREDS])
    g = torch.Generator().manual_seed(3)
    noise = 0.05 * torch.randn(values.shape, generator=g)
    batch[Postprocessing.VALUE_TARGETS] = (values + noise) * mask
    _, fwd, _ = _loss(learner, batch)
    logged = float(learner.metrics.peek((DEFAULT_MODULE_ID, LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY)))
    targets = batch[Postprocessing.VALUE_TARGETS][mask]
    with torch.no_grad():
        raw = module.vf.denormalize(fwd[VF_PREDS])[mask]
        normalized = fwd[VF_PREDS][mask]
    want = 1 - float((targets - raw).var() / targets.var())
    assert logged == pytest.approx(want, rel=1e-4)
    assert want > 0.5
    assert abs(1 - float((targets - normalized).var() / targets.var()) - want) > 0.1
