"""Reward-filtered fine-tuning (RAFT), imitation and dynamic sampling: which episodes an update
trains on, and the NLL it trains with (a real ``TokenLearner`` on the tiny model, no Ray)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from memrl.envs.text import INFO_SUCCESS
from memrl.methods.mem1.advantages import add_advantages
from memrl.methods.mem1.batch import build_rows
from memrl.methods.mem1.context import ContextPolicy, Turn
from memrl.methods.mem1.rollout import TextEpisode, episode_success
from memrl.methods.mem1.selection import groups_with_signal, select_episodes

UPDATE_KEYS = ("input_ids", "position_ids", "seg", "vis", "loss_mask", "old_logp", "advantages")


def _episode(group: str, *, em: float, success: float, errors: int = 0, truncated: bool = False):
    ep = TextEpisode(f"task-{group}", group, [1, 2, 3], [Turn(gen_ids=[4, 5])], env_reward=em)
    ep.info = {"em": em, INFO_SUCCESS: success}
    ep.format_errors, ep.truncated = errors, truncated
    return ep


def test_raft_keeps_only_episodes_that_solve_their_task():
    solved = _episode("g0", em=2.0, success=1.0)
    guess = _episode("g0", em=1.0, success=0.0)  # "1931; 1931": one of two questions right
    with_error = _episode("g1", em=2.0, success=1.0, errors=1)
    cut_off = _episode("g1", em=2.0, success=1.0, truncated=True)
    failed = _episode("g2", em=0.0, success=0.0)
    episodes = [solved, guess, with_error, cut_off, failed]
    assert [episode_success(ep) for ep in episodes] == [True, False, False, False, False]
    for algorithm in ("raft", "imitation"):
        kept = select_episodes(episodes, algorithm, format_penalty=0.0, dynamic_sampling=False)
        assert kept == [solved]
    assert groups_with_signal([solved]) == 1
    # PPO and GRPO without dynamic sampling train on everything they sampled.
    for algorithm in ("ppo", "grpo"):
        kept = select_episodes(episodes, algorithm, format_penalty=0.0, dynamic_sampling=False)
        assert kept == episodes


def test_dynamic_sampling_drops_grpo_groups_whose_rewards_are_all_equal():
    varied = [_episode("a", em=1.0, success=0.0), _episode("a", em=2.0, success=1.0)]
    all_zero = [_episode("b", em=0.0, success=0.0), _episode("b", em=0.0, success=0.0)]
    all_two = [_episode("c", em=2.0, success=1.0), _episode("c", em=2.0, success=1.0)]
    # Equal env rewards, but a format error in one: with a penalty the rewards differ.
    penalised = [_episode("d", em=1.0, success=0.0), _episode("d", em=1.0, success=0.0, errors=1)]
    episodes = varied + all_zero + all_two + penalised
    kept = select_episodes(episodes, "grpo", format_penalty=0.0, dynamic_sampling=True)
    assert kept == varied
    kept = select_episodes(episodes, "grpo", format_penalty=0.5, dynamic_sampling=True)
    assert kept == varied + penalised and groups_with_signal(kept) == 2


def _rows_with_observations(vocab: int):
    """Two episodes of two turns with observations between them, as per-turn rows."""
    rng = np.random.default_rng(0)
    episodes = []
    for e in range(2):
        turns = [
            Turn(
                gen_ids=rng.integers(5, vocab, 5).tolist(),
                obs_ids=rng.integers(5, vocab, 7).tolist(),
            ),
            Turn(gen_ids=rng.integers(5, vocab, 4).tolist(), obs_ids=[]),
        ]
        prompt = rng.integers(5, vocab, 6).tolist()
        episodes.append(TextEpisode(f"t{e}", f"g{e}", prompt, turns, env_reward=2.0))
    cols = build_rows(episodes, ContextPolicy("mem1"), "per_turn", 64, pad_id=0)
    add_advantages(cols, {}, episodes, algorithm="raft", kl_coef=0.0, recompute_old_logp=False)
    return episodes, cols


def test_raft_nll_covers_generated_tokens_only(make_learner):
    learner = make_learner(algorithm="raft", group_size=2, kl_coef=0.0)
    vocab = learner._policy().lm.config.vocab_size
    episodes, cols = _rows_with_observations(vocab)
    mask = cols["loss_mask"]
    generated = sum(len(t.gen_ids) for ep in episodes for t in ep.turns)
    assert mask.sum() == generated  # prompts and observations carry no loss
    rng = np.random.default_rng(1)
    logp = torch.as_tensor(-rng.uniform(0.1, 3.0, mask.shape).astype(np.float32))
    batch = {k: torch.as_tensor(cols[k]) for k in (*UPDATE_KEYS, "ref_logp")}
    loss = learner.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID, config=None, batch=batch, fwd_out={"logp": logp}
    )
    assert loss.item() == pytest.approx(-logp.numpy()[mask].mean(), rel=1e-6)
    # Log-probs off the generated tokens (prompt, observations, padding) do not move it.
    moved = torch.where(torch.as_tensor(mask), logp, logp - 5.0)
    again = learner.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID, config=None, batch=batch, fwd_out={"logp": moved}
    )
    assert again.item() == pytest.approx(loss.item(), rel=1e-6)


def test_raft_updates_raise_the_kept_episodes_likelihood_with_one_optimizer(make_learner):
    learner = make_learner(algorithm="raft", group_size=2, kl_coef=0.0, lr=3e-3, grad_clip=1e9)
    vocab = learner._policy().lm.config.vocab_size
    _, cols = _rows_with_observations(vocab)
    rows = {k: cols[k] for k in (*UPDATE_KEYS, "ref_logp")}
    batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(rows)}, env_steps=1)

    def nll() -> float:
        scored = learner.score_rows(cols, token_budget=10_000, reference=False)
        return float(-scored["logp"][cols["loss_mask"]].mean())

    before = nll()
    for _ in range(3):
        results = learner.update(batch=batch)
    after = nll()
    assert after < before - 0.05, (before, after)
    stats = {k: v.peek() for k, v in results[DEFAULT_MODULE_ID].items()}
    assert "nll" in stats and "policy_loss" not in stats
    # The optimizer (and its moments) carries over from update to update: one AdamW, 3 steps.
    (optim,) = learner._optimizer_parameters
    first = optim.param_groups[0]["params"][0]
    assert int(optim.state[first]["step"]) == 3


def test_sampling_for_an_update_stops_once_enough_groups_carry_signal(mem1_config):
    from memrl.methods.mem1.algorithm import Mem1Algorithm

    batches = iter(
        [
            [_episode("r0", em=0.0, success=0.0), _episode("r0", em=0.0, success=0.0)],
            [_episode("r1", em=2.0, success=1.0), _episode("r1", em=1.0, success=0.0)],
            [_episode("r2", em=2.0, success=1.0), _episode("r2", em=0.0, success=0.0)],
            [_episode("r3", em=2.0, success=1.0), _episode("r3", em=2.0, success=1.0)],
        ]
    )
    algo = Mem1Algorithm.__new__(Mem1Algorithm)
    algo._sample_once = lambda: next(batches)  # stands in for the env runners' sample()
    algo.config = mem1_config(
        algorithm="raft", group_size=2, dynamic_sampling=2, dynamic_sampling_rounds=4
    )
    episodes, selected, rounds = algo._sample_for_update()
    assert rounds == 3 and len(episodes) == 6
    assert [ep.group_id for ep in selected] == ["r1", "r2"]
    # Capped at dynamic_sampling_rounds: trains on what it has.
    batches = iter([[_episode(f"z{k}", em=0.0, success=0.0)] * 2 for k in range(5)])
    algo.config = mem1_config(
        algorithm="raft", group_size=2, dynamic_sampling=1, dynamic_sampling_rounds=2
    )
    episodes, selected, rounds = algo._sample_for_update()
    assert (rounds, len(episodes), selected) == (2, 4, [])


def test_dynamic_sampling_and_imitation_are_checked(mem1_config, tmp_path):
    with pytest.raises(ValueError, match="dynamic_sampling drops groups without signal"):
        mem1_config(algorithm="ppo", dynamic_sampling=2)
    with pytest.raises(ValueError, match="dynamic_sampling must be >= 0"):
        mem1_config(algorithm="grpo", group_size=2, dynamic_sampling=-1)
    with pytest.raises(ValueError, match="dynamic_sampling_rounds must be >= 1"):
        mem1_config(algorithm="grpo", group_size=2, dynamic_sampling=1, dynamic_sampling_rounds=0)
