"""Token-level losses and advantages, checked against hand-computed values."""

import math

import numpy as np
import pytest
import torch

from memrl.methods.mem1.advantages import group_normalized, last_token_of_episode, token_returns
from memrl.methods.mem1.batch import collate, episode_units, pack_rows
from memrl.methods.mem1.context import ContextPolicy, Turn, dense_mask, per_turn_units
from memrl.methods.mem1.losses import (
    clipped_pg_loss,
    clipped_value_loss,
    kl_k3,
    masked_mean,
    masked_whiten,
    nll_loss,
    rl_loss,
)
from memrl.methods.mem1.rollout import TextEpisode
from memrl.methods.ppo_math import approx_kl


def test_clipped_pg_loss_by_hand():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0, 9.0]]))
    old = torch.zeros((1, 4))
    adv = torch.tensor([[1.0, -1.0, 2.0, 5.0]])
    mask = torch.tensor([[True, True, True, False]])
    loss, stats = clipped_pg_loss(logp, old, adv, mask, clip=0.2)
    # token 0: ratio 1.5, A=1 -> max(-1.5, -1.2) = -1.2; token 1: ratio .5, A=-1 -> max(.5, .8) = .8
    # token 2: ratio 1, A=2 -> -2; token 3 masked out.
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 2.0) / 3)
    assert stats["clipfrac"].item() == pytest.approx(2 / 3)


def test_clipped_value_loss_by_hand():
    values = torch.tensor([[2.0, 0.0]])
    old = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[1.0, 3.0]])
    mask = torch.tensor([[True, True]])
    loss, _ = clipped_value_loss(values, old, returns, mask, clip=0.5)
    # token 0: unclipped (2-1)^2 = 1, clipped (0.5-1)^2 = .25 -> 1; token 1: 9 and 9 -> 9
    assert loss.item() == pytest.approx(0.5 * (1 + 9) / 2)


def test_value_clip_is_around_the_old_values():
    values = torch.tensor([[3.0, -1.0]])
    old = torch.tensor([[2.0, 1.0]])
    returns = torch.tensor([[3.5, 0.0]])
    mask = torch.tensor([[True, True]])
    loss, stats = clipped_value_loss(values, old, returns, mask, clip=0.5)
    # token 0: unclipped (3-3.5)^2 = .25, clipped to 2.5: (2.5-3.5)^2 = 1 -> 1;
    # token 1: unclipped (-1-0)^2 = 1, clipped to 0.5: .25 -> 1
    assert loss.item() == pytest.approx(0.5 * (1 + 1) / 2)
    assert stats["vf_clipfrac"].item() == pytest.approx(0.5)


def test_value_clip_separates_old_from_new_values_where_it_binds():
    """The clip is around the old values: token 0 moved four times the clip (2.0 to 3.0, clip
    0.25), so its clipped value is 2.25 (not 3.0 - 0.25, a clip around the new value); token 1
    moved less than the clip, so its clipped value is its own 1.1 (not the old 1.0). The hand
    cases above cannot tell the two apart."""
    values = torch.tensor([[3.0, 1.1]])
    old = torch.tensor([[2.0, 1.0]])
    returns = torch.tensor([[3.5, 2.0]])
    mask = torch.tensor([[True, True]])
    loss, stats = clipped_value_loss(values, old, returns, mask, clip=0.25)
    # token 0: unclipped (3-3.5)^2 = .25, clipped (2.25-3.5)^2 = 1.5625 -> 1.5625;
    # token 1: unclipped = clipped = (1.1-2)^2 = .81
    assert loss.item() == pytest.approx(0.5 * (1.5625 + 0.81) / 2)
    assert stats["vf_clipfrac"].item() == pytest.approx(0.5)


def test_approx_kl_is_the_non_negative_estimate():
    """(r - 1) - log r per step: 1 - ln 2 at r = 2, ln 2 - 1/2 at r = 1/2, 0 at r = 1, and
    never negative; clipped_pg_loss reports its token-mean."""
    log_ratio = torch.log(torch.tensor([2.0, 0.5, 1.0]))
    want = [1.0 - math.log(2.0), math.log(2.0) - 0.5, 0.0]
    assert approx_kl(log_ratio).tolist() == pytest.approx(want, abs=1e-6)
    assert bool((approx_kl(torch.randn(1000) * 3) >= 0).all())
    mask = torch.ones(1, 3, dtype=torch.bool)
    _, stats = clipped_pg_loss(log_ratio[None], torch.zeros(1, 3), torch.ones(1, 3), mask, 0.2)
    assert stats["approx_kl"].item() == pytest.approx(sum(want) / 3, abs=1e-6)


def test_losses_ignore_unmasked_tokens_entirely():
    logp = torch.randn(2, 6, requires_grad=True)
    mask = torch.tensor([[0, 1, 1, 0, 0, 1], [1, 0, 0, 0, 1, 1]], dtype=torch.bool)
    adv = torch.randn(2, 6)
    loss, _ = clipped_pg_loss(logp, logp.detach() + 0.1, adv, mask, 0.2)
    loss = loss + nll_loss(logp, mask) + masked_mean(kl_k3(logp, torch.zeros(2, 6)), mask)
    loss.backward()
    assert torch.all(logp.grad[~mask] == 0) and torch.all(logp.grad[mask] != 0)
    garbage = adv.clone()
    garbage[~mask] = 1e6
    loss2, _ = clipped_pg_loss(logp.detach(), logp.detach() + 0.1, garbage, mask, 0.2)
    loss1, _ = clipped_pg_loss(logp.detach(), logp.detach() + 0.1, adv, mask, 0.2)
    assert loss1.item() == pytest.approx(loss2.item())


def test_kl_k3_is_nonnegative_and_zero_at_the_reference():
    a = torch.randn(100)
    b = torch.randn(100)
    assert torch.all(kl_k3(a, b) >= 0)
    assert torch.allclose(kl_k3(a, a), torch.zeros(100))


def test_masked_whiten():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[True, True, True, False]])
    w = masked_whiten(x, mask)
    assert w[0, 3] == 0 and masked_mean(w, mask).abs() < 1e-6


def _rows_for(episodes_turns):
    units = []
    for e, turns in enumerate(episodes_turns):
        units += [(e, u) for u in per_turn_units(ContextPolicy("mem1"), [1, 2], turns)]
    return collate(units, pack_rows(units, 12), pad_id=0)


def test_returns_run_over_turns_and_rows_in_generation_order():
    turns = [Turn(gen_ids=[5, 6], obs_ids=[7]), Turn(gen_ids=[8, 9, 10])]
    cols = _rows_for([turns, [Turn(gen_ids=[3])]])
    assert cols["input_ids"].shape[0] >= 2  # the first episode spans rows
    mask = cols["loss_mask"]
    rewards = np.zeros(mask.shape, np.float32)
    rewards[mask] = 1.0  # one per generated token
    last = last_token_of_episode(cols, 2)
    rewards[last] += 10.0
    returns = token_returns(rewards, cols)
    by_token = {}
    for r, t in zip(*np.nonzero(mask), strict=True):
        by_token[(cols["episode"][r, t], cols["token_order"][r, t])] = returns[r, t]
    # Episode 0 has 5 generated tokens: reward-to-go 5+10, 4+10, ..., 1+10.
    assert [by_token[(0, k)] for k in range(5)] == [15, 14, 13, 12, 11]
    assert by_token[(1, 0)] == 11
    assert last.sum() == 2


def test_group_normalization_never_mixes_groups():
    rewards = [0.0, 2.0, 100.0, 100.0, 5.0]
    groups = ["a", "a", "b", "b", "c"]
    adv = group_normalized(rewards, groups)
    np.testing.assert_allclose(adv[:2], [-1.0, 1.0], atol=1e-5)
    np.testing.assert_allclose(adv[2:], [0.0, 0.0, 0.0])  # equal rewards; a group of one
    # Changing another group's rewards leaves a group's advantages alone.
    adv2 = group_normalized([0.0, 2.0, -50.0, 80.0, 5.0], groups)
    np.testing.assert_allclose(adv[:2], adv2[:2])


def test_rows_pack_without_overflowing():
    units = [
        (0, u)
        for u in per_turn_units(
            ContextPolicy("full"), list(range(5)), [Turn(gen_ids=[1] * 3, obs_ids=[2] * 2)] * 4
        )
    ]
    rows = pack_rows(units, 20)
    for row in rows:
        assert sum(len(units[i][1]) for i in row) <= 20 or len(row) == 1
    assert sorted(i for row in rows for i in row) == list(range(len(units)))


@pytest.mark.parametrize("mode", ["packed", "packed_exact"])
def test_packed_rows_keep_each_units_attention_mask(mode):
    """Several multi-segment units in one row: inside each unit the row's mask is the unit's
    own (causal and segment-visible, scratch spans hidden from later turns); across units,
    nothing."""
    episodes = []
    for e in range(3):
        turns = [Turn(gen_ids=[10 + t, 11 + t, 12 + t], obs_ids=[50 + t]) for t in range(3)]
        turns[0].scratch = (0, 1)
        turns[-1].obs_ids = []
        episodes.append(TextEpisode(f"t{e}", "g", [1, 2 + e], turns))
    units = episode_units(episodes, ContextPolicy("mem1"), mode)
    cols = collate(units, [list(range(len(units)))], pad_id=0)
    row = dense_mask(cols["seg"][0], cols["vis"][0])
    start = 0
    for _, u in units:
        n = len(u)
        own = dense_mask(u.seg, u.vis)
        assert not np.array_equal(own, np.tril(np.ones((n, n), dtype=bool)))  # not plain causal
        np.testing.assert_array_equal(row[start : start + n, start : start + n], own)
        assert not row[start : start + n, :start].any()
        start += n


def _loss_batch():
    """One row, three tokens, the last off the loss; ratios 1.5 and 0.5 at advantages +1, -1."""
    logp = torch.log(torch.tensor([[1.5, 0.5, 3.0]]))
    return logp, {
        "loss_mask": torch.tensor([[True, True, False]]),
        "old_logp": torch.zeros((1, 3)),
        "advantages": torch.tensor([[1.0, -1.0, 7.0]]),
        "old_values": torch.zeros((1, 3)),
        "returns": torch.tensor([[1.0, 3.0, 9.0]]),
        # reference: equal at token 0, 0.1 below at token 1 (PPO); GRPO's uses + ln 2 at token 0
        "ref_logp": logp - torch.tensor([[0.0, 0.1, 5.0]]),
    }


def test_ppo_loss_by_hand():
    logp, batch = _loss_batch()
    values = torch.tensor([[2.0, 0.0, 5.0]])
    loss, stats = rl_loss(
        "ppo", logp, batch, clip=0.2, kl_coef=0.3, vf_clip=0.5, vf_loss_coeff=0.5, values=values
    )
    # policy: token 0 max(-1.5, -1.2) = -1.2, token 1 max(.5, .8) = .8 -> mean -0.2
    # value: token 0 max((2-1)^2, (0.5-1)^2) = 1, token 1 max(9, 9) = 9 -> 0.5 x mean = 2.5
    assert stats["policy_loss"].item() == pytest.approx(-0.2)
    assert stats["vf_loss"].item() == pytest.approx(2.5)
    assert loss.item() == pytest.approx(-0.2 + 0.5 * 2.5)  # PPO's KL is in the reward
    assert stats["ref_kl"].item() == pytest.approx(0.05)  # mean of logp - ref = (0, 0.1)
    assert stats["clipfrac"].item() == pytest.approx(1.0)
    assert stats["vf_clipfrac"].item() == pytest.approx(0.0)
    with pytest.raises(ValueError, match="critic"):
        rl_loss("ppo", logp, batch, clip=0.2, kl_coef=0.3)


def test_grpo_loss_by_hand():
    logp, batch = _loss_batch()
    batch["ref_logp"] = logp + torch.tensor([[math.log(2.0), 0.0, 1.0]])
    loss, stats = rl_loss("grpo", logp, batch, clip=0.2, kl_coef=0.5)
    # k3 with d = ref - logp = (ln 2, 0): exp(d) - d - 1 = (1 - ln 2, 0), mean (1 - ln 2) / 2
    kl = (1 - math.log(2.0)) / 2
    assert stats["ref_kl"].item() == pytest.approx(kl)
    assert loss.item() == pytest.approx(-0.2 + 0.5 * kl)
    assert "vf_loss" not in stats
    logp = logp.clone().requires_grad_(True)
    rl_loss("grpo", logp, batch, clip=0.2, kl_coef=0.5)[0].backward()
    # d/dlogp of kl_coef x k3 / 2 at token 0: 0.5 x (1 - 2) / 2; of the policy term: token 0 is
    # clipped (no gradient), so only the KL term moves it, toward the reference.
    assert logp.grad[0, 0].item() == pytest.approx(0.5 * (1 - 2.0) / 2)
    assert logp.grad[0, 2].item() == 0.0


@pytest.mark.parametrize("algorithm", ["ppo", "grpo"])
def test_loss_pieces_with_the_whole_token_count_add_up_to_the_whole(algorithm):
    torch.manual_seed(0)
    b, t = 4, 6
    logp = torch.randn(b, t) * 0.1 - 1.0
    batch = {
        "loss_mask": torch.rand(b, t) > 0.3,
        "old_logp": logp + torch.randn(b, t) * 0.1,
        "advantages": torch.randn(b, t),
        "old_values": torch.randn(b, t),
        "returns": torch.randn(b, t),
        "ref_logp": logp + torch.randn(b, t) * 0.1,
    }
    values = torch.randn(b, t)
    kw = {"clip": 0.2, "kl_coef": 0.1, "vf_clip": 0.5, "values": values}
    whole, stats = rl_loss(algorithm, logp, batch, **kw)
    n = batch["loss_mask"].sum()
    parts = []
    for rows in ([0], [1, 2], [3]):
        sub = {k: v[rows] for k, v in batch.items()}
        kw["values"] = values[rows]
        parts.append(rl_loss(algorithm, logp[rows], sub, num_tokens=n, **kw))
    assert sum(p[0] for p in parts).item() == pytest.approx(whole.item(), rel=1e-5)
    total_kl = sum(p[1]["ref_kl"] for p in parts).item()
    assert total_kl == pytest.approx(stats["ref_kl"].item(), rel=1e-5)
