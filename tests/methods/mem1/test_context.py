"""Context policies: what the model sees per turn, and the training layouts derived from them."""

import numpy as np
import pytest

from memrl.methods.mem1.context import (
    ContextPolicy,
    Turn,
    context_ids,
    dense_mask,
    packed_exact_unit,
    packed_unit,
    per_turn_units,
)

PROMPT = [1, 2, 3]


def episode(num_turns: int, scratch: bool = False) -> list[Turn]:
    """Turn t generates [100t+10, 100t+11, 100t+12] and observes [100t+50, 100t+51]."""
    turns = []
    for t in range(num_turns):
        gen = [100 * t + 10, 100 * t + 11, 100 * t + 12]
        obs = [100 * t + 50, 100 * t + 51] if t < num_turns - 1 else []
        turns.append(
            Turn(
                gen_ids=gen,
                obs_ids=obs,
                logps=[-0.1 * (t + 1)] * 3,
                scratch=(0, 1) if scratch else None,
            )
        )
    return turns


def test_mem1_keeps_prompt_latest_turn_and_observation_only():
    turns = episode(4)
    pol = ContextPolicy("mem1")
    assert context_ids(pol, PROMPT, turns, 0) == PROMPT
    assert context_ids(pol, PROMPT, turns, 1) == PROMPT + [10, 11, 12, 50, 51]
    assert context_ids(pol, PROMPT, turns, 3) == PROMPT + [210, 211, 212, 250, 251]


def test_full_keeps_everything_and_last_k_a_window():
    turns = episode(4)
    full = context_ids(ContextPolicy("full"), PROMPT, turns, 3)
    assert full == PROMPT + [10, 11, 12, 50, 51, 110, 111, 112, 150, 151, 210, 211, 212, 250, 251]
    last2 = context_ids(ContextPolicy("last_k", k=2), PROMPT, turns, 3)
    assert last2 == PROMPT + [110, 111, 112, 150, 151, 210, 211, 212, 250, 251]


def test_prompt_survives_long_episodes():
    # The public code's left-truncated rolling buffer could lose the prompt; segments cannot.
    turns = episode(40)
    for name in ("mem1", "full", "last_k"):
        ids = context_ids(ContextPolicy(name, k=3), PROMPT, turns, 39)
        assert ids[:3] == PROMPT


def test_unknown_policy_is_refused_with_the_list():
    with pytest.raises(ValueError, match="Available"):
        ContextPolicy("everything")


def test_per_turn_units_are_the_rollout_contexts_plus_generation():
    turns = episode(3)
    pol = ContextPolicy("mem1")
    units = per_turn_units(pol, PROMPT, turns)
    assert len(units) == 3
    for j, u in enumerate(units):
        ctx = context_ids(pol, PROMPT, turns, j)
        assert list(u.input_ids) == ctx + turns[j].gen_ids
        assert list(u.position_ids) == list(range(len(ctx) + 3))
        assert u.loss_mask.sum() == 3 and not u.loss_mask[: len(ctx)].any()
        np.testing.assert_allclose(u.behaviour_logp[u.loss_mask], turns[j].logps)


def _visible(unit, q_token, k_token) -> bool:
    ids = list(unit.input_ids)
    q, k = ids.index(q_token), ids.index(k_token)
    return bool(dense_mask(unit.seg, unit.vis)[q, k])


def test_packed_mem1_mask_matches_the_rollout_context():
    turns = episode(3)
    u = packed_unit(ContextPolicy("mem1"), PROMPT, turns)
    # gen_2 sees the prompt, gen_1 (the previous internal state: the public code hid it), obs_1.
    assert _visible(u, 210, 1) and _visible(u, 210, 110) and _visible(u, 210, 150)
    # ... and nothing older.
    assert not _visible(u, 210, 10) and not _visible(u, 210, 50)
    # obs_1 is encoded, at turn 2, after the prompt and gen_1 only.
    assert _visible(u, 151, 110) and _visible(u, 151, 1) and not _visible(u, 151, 50)
    # Later tokens never visible (causal), own earlier tokens always.
    assert not _visible(u, 110, 111) and _visible(u, 112, 110)
    # Loss covers exactly the generated tokens.
    gen = [i for t in turns for i in t.gen_ids]
    assert sorted(u.input_ids[u.loss_mask].tolist()) == sorted(gen)
    # Generated tokens keep their rollout positions: gen_2 came after prompt + gen_1 + obs_1.
    ids = list(u.input_ids)
    assert u.position_ids[ids.index(210)] == 3 + 3 + 2


def test_packed_full_is_plain_causal():
    turns = episode(3)
    u = packed_unit(ContextPolicy("full"), PROMPT, turns)
    t = len(u)
    np.testing.assert_array_equal(dense_mask(u.seg, u.vis), np.tril(np.ones((t, t), dtype=bool)))
    np.testing.assert_array_equal(u.position_ids, np.arange(t))


def test_scratch_is_dropped_from_later_contexts_but_seen_within_its_turn():
    turns = episode(2, scratch=True)
    pol = ContextPolicy("mem1")
    assert context_ids(pol, PROMPT, turns, 1) == PROMPT + [11, 12, 50, 51]
    u = packed_unit(pol, PROMPT, turns)
    assert _visible(u, 12, 10)  # within turn 0
    assert not _visible(u, 110, 10) and _visible(u, 110, 11)  # turn 1 sees only the kept part
    assert not _visible(u, 50, 10)


def test_packed_exact_shares_what_is_equal_and_copies_what_differs():
    turns = episode(3)
    full = packed_exact_unit(ContextPolicy("full"), PROMPT, turns)
    plain = packed_unit(ContextPolicy("full"), PROMPT, turns)
    np.testing.assert_array_equal(full.input_ids, plain.input_ids)
    np.testing.assert_array_equal(dense_mask(full.seg, full.vis), dense_mask(plain.seg, plain.vis))
    u = packed_exact_unit(ContextPolicy("mem1"), PROMPT, turns)
    ids = list(u.input_ids)
    # The prompt once; gen_0 once (turn 1 re-encodes it right after the prompt, exactly where it
    # was generated); gen_1 twice (as generated after obs_0, and re-encoded after the prompt).
    assert ids.count(1) == 1 and ids.count(10) == 1 and ids.count(110) == 2 and ids.count(210) == 1
    first, second = [i for i, x in enumerate(ids) if x == 110]
    assert u.loss_mask[first] and not u.loss_mask[second]
    assert u.position_ids[second] == 3  # right after the prompt, as in turn 2's context
    mask = dense_mask(u.seg, u.vis)
    gen2 = ids.index(210)
    assert mask[gen2, second] and not mask[gen2, first]  # turn 2 sees the re-encoded copy
    assert not mask[second, ids.index(50)]  # which, like at rollout, did not see obs_0
    assert sorted(u.input_ids[u.loss_mask].tolist()) == sorted(i for t in turns for i in t.gen_ids)


@pytest.mark.parametrize("name", ["mem1", "last_k", "full"])
def test_packed_exact_shows_each_turn_its_rollout_context_with_scratch_spans(name):
    """Every generated token of packed_exact sees exactly what it saw at rollout: the ids
    ``context_ids`` gives for its turn (kept state, never an earlier turn's scratch span under the
    pruning policies), then its own turn's earlier tokens, at positions 0, 1, 2, ... (none
    repeated). Turn 0 and turn 2 have scratch spans and later turns follow them."""
    turns = episode(4)
    turns[0].scratch, turns[2].scratch = (0, 1), (1, 3)
    pol = ContextPolicy(name, k=2)
    u = packed_exact_unit(pol, PROMPT, turns)
    mask = dense_mask(u.seg, u.vis)
    loss = np.nonzero(u.loss_mask)[0]
    for j, turn in enumerate(turns):
        ctx = context_ids(pol, PROMPT, turns, j)
        if name != "full" and j > 0:
            hidden = turns[j - 1].gen_ids[slice(*turns[j - 1].scratch or (0, 0))]
            assert not set(hidden) & set(ctx)  # the case under test: a span was dropped
        first = sum(len(t.gen_ids) for t in turns[:j])
        for i, q in enumerate(loss[first : first + len(turn.gen_ids)]):
            seen = np.nonzero(mask[q])[0]
            assert u.input_ids[seen].tolist() == ctx + turn.gen_ids[: i + 1], (j, i)
            assert u.position_ids[seen].tolist() == list(range(len(ctx) + i + 1)), (j, i)
        np.testing.assert_allclose(u.behaviour_logp[loss[first : first + 3]], turn.logps)
