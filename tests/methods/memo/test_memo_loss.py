"""Memo's loss math on hand-made numbers: PPO terms, explained variance, PopArt, minibatches."""

from __future__ import annotations

import math

import pytest
import torch
from ray.rllib.core.columns import Columns

from memrl.methods.memo.learner import explained_variance, ppo_terms, row_minibatches
from memrl.methods.memo.value_head import PopArtHead


def test_ppo_terms_match_hand_computed_values():
    # One row, three steps; the third is padding (masked out) and must not count.
    logp = torch.tensor([[-0.5, -1.0, -2.0]])
    old = torch.tensor([[-0.7, -0.8, -9.0]])
    adv = torch.tensor([[1.0, -2.0, 5.0]])
    v = torch.tensor([[0.5, 1.0, 7.0]])
    target = torch.tensor([[1.5, -2.0, 0.0]])
    ent = torch.tensor([[1.2, 0.8, 3.0]])
    mask = torch.tensor([[True, True, False]])
    out = ppo_terms(
        logp, old, adv, v, target, ent, mask, clip=0.2, vf_clip=4.0, vf_coeff=0.5, entropy_coeff=0.1
    )
    r0, r1 = math.exp(0.2), math.exp(-0.2)  # ratios of the two real steps
    # step 0: A > 0, ratio 1.221 above 1.2 -> the clipped term 1.2 * 1 is the min
    pg0 = -min(1.0 * r0, 1.0 * 1.2)
    # step 1: A < 0, ratio 0.819 below 0.8? no: 0.819 in range -> -(-2 * 0.819)
    pg1 = -min(-2.0 * r1, -2.0 * max(r1, 0.8))
    vf0, vf1 = (0.5 - 1.5) ** 2, min((1.0 + 2.0) ** 2, 4.0)  # 1.0, 9 clipped to 4
    expected = ((pg0 + 0.5 * vf0 - 0.1 * 1.2) + (pg1 + 0.5 * vf1 - 0.1 * 0.8)) / 2
    assert float(out["total"]) == pytest.approx(expected, rel=1e-6)
    assert float(out["pg_loss"][0, 0]) == pytest.approx(-1.2, rel=1e-6)
    assert float(out["pg_loss"][0, 1]) == pytest.approx(2.0 * r1, rel=1e-6)
    assert float(out["vf_loss"][0, 1]) == 4.0 and float(out["vf_err"][0, 1]) == 9.0


def test_ppo_gradient_pushes_the_probability_of_good_actions_up():
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    out = ppo_terms(
        logp,
        torch.tensor([[-1.0, -1.0]]),
        torch.tensor([[1.0, -1.0]]),
        torch.zeros(1, 2),
        torch.zeros(1, 2),
        torch.zeros(1, 2),
        torch.ones(1, 2, dtype=torch.bool),
        clip=0.2,
        vf_clip=10.0,
        vf_coeff=0.5,
        entropy_coeff=0.0,
    )
    out["total"].backward()
    assert logp.grad[0, 0] < 0 < logp.grad[0, 1]  # minimizing raises logp where A > 0


def test_explained_variance_covers_every_loss_step_not_trial_step_zero():
    """RLlib's helper takes the variance over dim 0 and keeps [0]: on (rows, steps) that is trial
    step 0 only. Here step 0 is unpredictable and every later step is predicted exactly."""
    torch.manual_seed(0)
    targets = torch.randn(16, 10) * 3
    preds = targets.clone()
    preds[:, 0] = 0.0
    mask = torch.ones(16, 10, dtype=torch.bool)
    ev = float(explained_variance(targets, preds, mask))
    assert 0.85 < ev < 0.95  # 1 - var(errors) / var(targets): one step in ten is wrong
    first = mask.clone()
    first[:, 1:] = False
    assert float(explained_variance(targets, preds, first)) < 0.2
    later = ~first
    assert float(explained_variance(targets, preds, later)) == pytest.approx(1.0)


def test_popart_update_preserves_outputs_and_tracks_the_targets():
    torch.manual_seed(0)
    head = PopArtHead(4, normalize=True, decay=0.5)
    x = torch.randn(32, 4)
    before = head.denormalize(head(x).squeeze(-1)).detach()
    targets = torch.randn(200) * 5.0 + 12.0
    head.update(targets)
    after = head.denormalize(head(x).squeeze(-1)).detach()
    torch.testing.assert_close(after, before, atol=1e-4, rtol=1e-5)
    mean, std = head.stats()
    assert float(mean) == pytest.approx(float(targets.mean()), rel=1e-5)
    assert float(std) == pytest.approx(float(targets.std(unbiased=False)), rel=1e-4)
    head.update(torch.full((50,), 20.0))  # second batch: debiased EMA of the two
    mean, _ = head.stats()
    assert float(mean) == pytest.approx((0.5 * 0.5 * float(targets.mean()) + 0.5 * 20) / 0.75)
    again = head.denormalize(head(x).squeeze(-1)).detach()
    torch.testing.assert_close(again, before, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(
        head.normalize(head.denormalize(torch.tensor([0.3]))), torch.tensor([0.3])
    )


def test_popart_off_is_the_identity():
    head = PopArtHead(3, normalize=False)
    head.update(torch.randn(10) * 7 + 3)
    assert [float(s) for s in head.stats()] == [0.0, 1.0]


def _batch(steps_per_row: list[int]) -> dict[str, dict[str, torch.Tensor]]:
    T = max(steps_per_row)
    mask = torch.zeros(len(steps_per_row), T, dtype=torch.bool)
    for i, n in enumerate(steps_per_row):
        mask[i, T - n :] = True
    return {
        "default_policy": {
            Columns.LOSS_MASK: mask,
            Columns.OBS: torch.arange(len(steps_per_row) * T).reshape(-1, T).float(),
            "memo_seg_len": torch.full((len(steps_per_row),), 4),
        }
    }


def test_minibatches_keep_rows_whole_and_cover_each_row_once_per_epoch_in_a_new_order():
    batch = _batch([10] * 7)
    out = list(row_minibatches(batch, minibatch_size=25, num_epochs=2, env_steps=70, seed=1))
    assert len(out) == 2 * 3  # ceil(70 / 25) = 3 per epoch
    orders = []
    for epoch in (out[:3], out[3:]):
        rows = torch.cat([m.policy_batches["default_policy"][Columns.OBS][:, 0] for m in epoch])
        assert sorted(rows.tolist()) == [10.0 * i for i in range(7)]
        orders.append(rows.tolist())
    assert orders[0] != orders[1]  # each epoch shuffles anew
    first = out[0].policy_batches["default_policy"]
    assert first[Columns.OBS].shape[1] == 10 and first["memo_seg_len"].shape == (
        first[Columns.OBS].shape[0],
    )


def test_gae_matches_hand_computed_values():
    from memrl.methods.memo.batch import gae

    rewards = torch.tensor([1.0, 0.0, 2.0]).numpy()
    values = torch.tensor([0.5, 1.0, 0.0, 3.0]).numpy()  # the last one bootstraps
    g, lam = 0.9, 0.8
    d = [1 + g * 1.0 - 0.5, 0 + g * 0.0 - 1.0, 2 + g * 3.0 - 0.0]
    a2 = d[2]
    a1 = d[1] + g * lam * a2
    a0 = d[0] + g * lam * a1
    assert gae(rewards, values, g, lam).tolist() == pytest.approx([a0, a1, a2], rel=1e-6)


def test_behaviour_weights_scale_each_steps_surrogate():
    """Decoupled PPO: the surrogate of each step times pi_prox / pi_behaviour, values and entropy
    untouched."""
    args = (
        torch.tensor([[-0.5, -1.0]]),
        torch.tensor([[-0.7, -0.8]]),
        torch.tensor([[1.0, -2.0]]),
        torch.tensor([[0.5, 1.0]]),
        torch.tensor([[1.5, -2.0]]),
        torch.tensor([[1.2, 0.8]]),
        torch.ones(1, 2, dtype=torch.bool),
    )
    kw = dict(clip=0.2, vf_clip=4.0, vf_coeff=0.5, entropy_coeff=0.1)
    plain = ppo_terms(*args, **kw)
    weights = torch.tensor([[0.5, 3.0]])
    weighted = ppo_terms(*args, **kw, behaviour_weights=weights)
    torch.testing.assert_close(weighted["pg_loss"], plain["pg_loss"] * weights)
    torch.testing.assert_close(weighted["vf_loss"], plain["vf_loss"])
    shift = (weighted["pg_loss"] - plain["pg_loss"]).mean()
    assert float(weighted["total"]) == pytest.approx(float(plain["total"] + shift), rel=1e-6)
