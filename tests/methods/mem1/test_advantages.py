"""PPO and GRPO advantages of row batches, against values worked out by hand, in every mode.

Two small episodes are laid out as rows in ``per_turn``, ``packed_exact`` and ``packed`` mode;
the learner's pre-update scores are written per generated token (by episode and generation
order), so the expected KL terms, returns and advantages below hold whatever the layout.
"""

from __future__ import annotations

import numpy as np
import pytest

from memrl.methods.mem1.advantages import add_advantages
from memrl.methods.mem1.batch import SEQUENCE_MODES, build_rows
from memrl.methods.mem1.context import ContextPolicy, Turn
from memrl.methods.mem1.rollout import TextEpisode

# Per generated token (episode, generation order): current log-prob, reference log-prob, value,
# and the rollout's behaviour log-prob.
LOGP = {0: [-1.0, -0.5, -2.0, -1.0, -0.5], 1: [-0.2, -0.4]}
REF = {0: [-1.5, -0.5, -1.0, -1.0, -1.5], 1: [-0.2, -0.2]}
VALUES = {0: [0.5] * 5, 1: [-0.5, 0.0]}
BEHAVIOUR = {0: [-1.0] * 5, 1: [-0.2, -0.2]}


def _episodes(groups=("g0", "g1")) -> list[TextEpisode]:
    """Episode 0: two turns (2 + 3 generated tokens), reward 1. Episode 1: one turn of 2 tokens,
    reward 0 and one unparsable turn."""
    b = BEHAVIOUR
    ep0 = TextEpisode(
        task_id="t0",
        group_id=groups[0],
        prompt_ids=[1, 2, 3],
        turns=[
            Turn(gen_ids=[10, 11], obs_ids=[20, 21], logps=b[0][:2]),
            Turn(gen_ids=[12, 13, 14], logps=b[0][2:]),
        ],
        env_reward=1.0,
    )
    ep1 = TextEpisode(
        task_id="t1",
        group_id=groups[1],
        prompt_ids=[4, 5],
        turns=[Turn(gen_ids=[15, 16], logps=b[1])],
        env_reward=0.0,
        format_errors=1,
    )
    return [ep0, ep1]


def _rows(episodes, mode):
    cols = build_rows(episodes, ContextPolicy("mem1"), mode, 8, pad_id=0)
    scored = {k: np.zeros(cols["input_ids"].shape, np.float32) for k in ("logp", "ref_logp")}
    scored["values"] = np.zeros(cols["input_ids"].shape, np.float32)
    for r, t in zip(*np.nonzero(cols["loss_mask"]), strict=True):
        e, k = cols["episode"][r, t], cols["token_order"][r, t]
        scored["logp"][r, t] = LOGP[e][k]
        scored["ref_logp"][r, t] = REF[e][k]
        scored["values"][r, t] = VALUES[e][k]
    return cols, scored


def _by_token(cols, key):
    """{episode: [value of each generated token, in generation order]}."""
    out: dict[int, dict[int, float]] = {}
    for r, t in zip(*np.nonzero(cols["loss_mask"]), strict=True):
        e, k = int(cols["episode"][r, t]), int(cols["token_order"][r, t])
        out.setdefault(e, {})[k] = float(cols[key][r, t])
    return {e: [v[k] for k in sorted(v)] for e, v in out.items()}


@pytest.mark.parametrize("mode", SEQUENCE_MODES)
def test_ppo_returns_and_advantages_by_hand(mode):
    cols, scored = _rows(_episodes(), mode)
    if mode == "per_turn":
        assert cols["input_ids"].shape[0] >= 2  # episode 0 spans two rows
    add_advantages(
        cols, scored, _episodes(), algorithm="ppo", kl_coef=0.1, format_penalty=0.5, whiten=False
    )
    # Episode 0: kl = logp - ref = [.5, 0, -1, 0, 1]; token rewards -0.1 kl = [-.05, 0, .1, 0, -.1]
    # and the outcome 1 on the last token (-.1 + 1 = .9); reward-to-go from each token:
    want_returns = {0: [0.95, 1.0, 1.0, 0.9, 0.9], 1: [-0.48, -0.48]}
    # Episode 1: kl = [0, -.2] -> rewards [0, .02]; outcome 0 - 0.5 x 1 format error on the last.
    got = _by_token(cols, "returns")
    for e, want in want_returns.items():
        np.testing.assert_allclose(got[e], want, atol=1e-6)
    advantages = _by_token(cols, "advantages")  # returns - V_old
    np.testing.assert_allclose(advantages[0], [0.45, 0.5, 0.5, 0.4, 0.4], atol=1e-6)
    np.testing.assert_allclose(advantages[1], [0.02, -0.48], atol=1e-6)
    assert not cols["advantages"][~cols["loss_mask"]].any()
    assert not cols["returns"][~cols["loss_mask"]].any()
    np.testing.assert_array_equal(cols["old_values"], scored["values"])
    np.testing.assert_array_equal(cols["ref_logp"], scored["ref_logp"])


@pytest.mark.parametrize("mode", SEQUENCE_MODES)
def test_ppo_whitens_over_the_generated_tokens(mode):
    cols, scored = _rows(_episodes(), mode)
    add_advantages(cols, scored, _episodes(), algorithm="ppo", kl_coef=0.1, format_penalty=0.5)
    raw = np.array([0.45, 0.5, 0.5, 0.4, 0.4, 0.02, -0.48])
    want = (raw - raw.mean()) / (raw.std() + 1e-8)
    got = _by_token(cols, "advantages")
    np.testing.assert_allclose(got[0] + got[1], want, atol=1e-5)


@pytest.mark.parametrize("mode", SEQUENCE_MODES)
def test_ppo_ratio_denominator_is_the_rollout_logp_when_not_recomputed(mode):
    cols, scored = _rows(_episodes(), mode)
    add_advantages(
        cols,
        scored,
        _episodes(),
        algorithm="ppo",
        kl_coef=0.1,
        whiten=False,
        recompute_old_logp=False,
    )
    for e, want in BEHAVIOUR.items():
        np.testing.assert_allclose(_by_token(cols, "old_logp")[e], want, atol=1e-7)
    # The KL reward uses the behaviour log-probs then: episode 0 kl = [.5, -.5, 0, 0, .5],
    # rewards [-.05, .05, 0, 0, -.05 + 1]; episode 1 kl = 0, outcome 0 (no format penalty).
    got = _by_token(cols, "returns")
    np.testing.assert_allclose(got[0], [0.95, 1.0, 0.95, 0.95, 0.95], atol=1e-6)
    np.testing.assert_allclose(got[1], [0.0, 0.0], atol=1e-6)
    cols, scored = _rows(_episodes(), mode)
    add_advantages(cols, scored, _episodes(), algorithm="ppo", kl_coef=0.1)
    for e, want in LOGP.items():
        np.testing.assert_allclose(_by_token(cols, "old_logp")[e], want, atol=1e-7)


def _grpo_episodes():
    """Five episodes in two groups: a = rewards (1, 0); b = rewards (2, 0, 1)."""
    out = []
    for i, (group, reward) in enumerate([("a", 1.0), ("a", 0.0), ("b", 2.0), ("b", 0), ("b", 1)]):
        turns = [Turn(gen_ids=[10 + i, 11], obs_ids=[20]), Turn(gen_ids=[12])]
        out.append(TextEpisode(f"t{group}", group, [1, 2], turns, env_reward=float(reward)))
    return out


@pytest.mark.parametrize("mode", SEQUENCE_MODES)
def test_grpo_normalizes_each_group_by_itself(mode):
    episodes = _grpo_episodes()
    cols = build_rows(episodes, ContextPolicy("mem1"), mode, 16, pad_id=0)
    zeros = np.zeros(cols["input_ids"].shape, np.float32)
    stats = add_advantages(
        cols, {"logp": zeros, "ref_logp": zeros}, episodes, algorithm="grpo", kl_coef=0.1
    )
    # Group a: mean .5, std .5 -> (+1, -1); group b: mean 1, std sqrt(2/3) -> (1.2247, -1.2247, 0).
    s = np.sqrt(2 / 3)
    want = [1.0, -1.0, 1 / s, -1 / s, 0.0]
    got = _by_token(cols, "advantages")
    for e, value in enumerate(want):
        np.testing.assert_allclose(got[e], [value] * 3, atol=1e-5)  # every generated token
    assert not cols["advantages"][~cols["loss_mask"]].any()
    assert stats["reward_mean"] == pytest.approx(0.8)
    assert "returns" not in cols and "old_values" not in cols


def test_grpo_group_of_one_and_unknown_algorithm():
    episodes = _grpo_episodes()[:1]
    cols = build_rows(episodes, ContextPolicy("mem1"), "per_turn", 16, pad_id=0)
    zeros = np.zeros(cols["input_ids"].shape, np.float32)
    scored = {"logp": zeros, "ref_logp": zeros}
    add_advantages(cols, scored, episodes, algorithm="grpo", kl_coef=0.0)
    assert not cols["advantages"].any()
    with pytest.raises(ValueError, match="'ppo', 'grpo', 'raft' or 'imitation'"):
        add_advantages(cols, scored, episodes, algorithm="a2c", kl_coef=0.0)
