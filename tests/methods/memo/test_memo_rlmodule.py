"""MemoRLModule: KV refresh after new weights, whole-trial rows, settings, RLlib training."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from memrl_testing import needs_cxx
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from memrl.methods.memo.batch import MemoTrialBatch, gae
from memrl.methods.memo.columns import MEMO_SEG_LEN, MEMO_TRIAL_T
from memrl.methods.memo.rlmodule import MemoRLModule
from memrl.methods.memo.settings import MemoModelSettings

torch.set_num_threads(1)  # small shared machines: one thread per test process

OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
ACT = gym.spaces.Discrete(3)
CONFIG = dict(d_model=16, n_layers=1, n_heads=2, l_seg=4, l_sum=2, encoder_hiddens=[16])


def _module(seed: int, **kw) -> MemoRLModule:
    torch.manual_seed(seed)
    return MemoRLModule(observation_space=OBS, action_space=ACT, model_config={**CONFIG, **kw})


def _act(module: MemoRLModule, obs: np.ndarray, trial_t: list[int]) -> torch.Tensor:
    batch = {Columns.OBS: torch.from_numpy(obs), MEMO_TRIAL_T: torch.tensor(trial_t)}
    return module.forward_exploration(batch)[Columns.ACTION_DIST_INPUTS]


def _held(cache, row: int) -> list[torch.Tensor]:
    """The K/V one env's cache row actually holds."""
    if cache.t is not None:
        return [cache.kv[:, :, row, :, : int(cache.t[row])]]
    n, s = int(cache.n_sum[row]), int(cache.seg_len[row])
    return [cache.sum_kv[:, :, row, :, :n], cache.seg_kv[:, :, row, :, :s]]


@pytest.mark.parametrize("mode", ["memo", "rmt", "fct"])
def test_kv_refresh_rebuilds_caches_under_new_weights(mode):
    rng = np.random.default_rng(0)
    runner = _module(0, mode=mode)
    # Three env slots at different points of their trials (slot 2 starts a new trial at step 6).
    history: dict[int, list[np.ndarray]] = {0: [], 1: [], 2: []}
    trial_t = [0, 0, 0]
    for step in range(11):
        obs = rng.normal(size=(3, 5)).astype(np.float32)
        if step == 6:
            trial_t[2], history[2] = 0, []
        for i in range(3):
            history[i].append(obs[i])
        _act(runner, obs, trial_t)
        trial_t = [t + 1 for t in trial_t]
    old = [[h.clone() for h in _held(runner.keeper.cache, i)] for i in range(3)]

    new_weights = _module(1, mode=mode).get_state()
    runner.set_state(new_weights)

    for i in range(3):
        # A fresh recompute: the slot's trial replayed step by step under the new weights, with
        # the segment length the runner drew at the sync.
        replay = _module(1, mode=mode)
        replay._acting_seg = runner._acting_seg
        for t, o in enumerate(history[i]):
            _act(replay, o[None], [t])
        got, want = _held(runner.keeper.cache, i), _held(replay.keeper.cache, 0)
        assert [g.shape for g in got] == [w.shape for w in want]
        for g, w, o in zip(got, want, old[i], strict=True):
            assert torch.allclose(g, w, atol=1e-5), (mode, i)
            assert not torch.allclose(g, o, atol=1e-3)  # the old weights' cache was replaced
    # Acting goes on from the refreshed caches.
    out = _act(runner, rng.normal(size=(3, 5)).astype(np.float32), trial_t)
    assert torch.isfinite(out).all()


def _episode(n_steps: int, rng: np.random.Generator) -> SingleAgentEpisode:
    ep = SingleAgentEpisode(observation_space=OBS, action_space=ACT)
    ep.add_env_reset(observation=rng.normal(size=5).astype(np.float32))
    for _ in range(n_steps):
        ep.add_env_step(
            observation=rng.normal(size=5).astype(np.float32),
            action=int(rng.integers(3)),
            reward=float(rng.normal()),
            extra_model_outputs={
                Columns.ACTION_LOGP: np.float32(-1.1),
                Columns.ACTION_DIST_INPUTS: np.zeros(3, np.float32),
            },
        )
    return ep


@pytest.mark.parametrize("value_norm", [False, True])
def test_learner_rows_start_at_the_trial_and_mask_only_new_steps(value_norm):
    rng = np.random.default_rng(1)
    first = _episode(10, rng)
    all_obs = np.asarray(first.get_observations())
    second = first.cut(len_lookback_buffer=50)
    for _ in range(5):
        o = rng.normal(size=5).astype(np.float32)
        all_obs = np.concatenate([all_obs, o[None]])
        second.add_env_step(
            observation=o,
            action=1,
            reward=1.0,
            extra_model_outputs={
                Columns.ACTION_LOGP: np.float32(-0.5),
                Columns.ACTION_DIST_INPUTS: np.ones(3, np.float32),
            },
        )
    second = second.to_numpy()
    module = _module(0, value_norm=value_norm)
    with torch.no_grad():  # a value scale far from the init's, so normalization has work to do
        module.vf.bias.fill_(3.0)
    batch = MemoTrialBatch(gamma=0.9, lambda_=0.8)(
        rl_module=module, batch={}, episodes=[second, first.to_numpy()]
    )
    data = batch["default_policy"]
    obs, mask = data[Columns.OBS].numpy(), data[Columns.LOSS_MASK].numpy()
    assert obs.shape == (2, 16, 5)
    np.testing.assert_allclose(obs[0], all_obs)  # row 0: trial from step 0, 10 lookback steps
    assert mask[0].tolist() == [False] * 10 + [True] * 5 + [False]
    assert mask[1].tolist() == [True] * 10 + [False] * 6
    assert (data[Columns.ACTIONS].numpy()[0, 10:15] == 1).all()
    assert data[MEMO_SEG_LEN].tolist() == [4, 4]  # no recorded length: l_seg
    # Value targets = GAE + values, with values from the whole-trial forward. With value
    # normalization the targets have moved the statistics since, and the output layer was
    # rescaled so that de-normalized values are unchanged (PopArt).
    with torch.no_grad():
        v = module.compute_values({Columns.OBS: torch.from_numpy(obs)})
    assert float(v[0, 0]) == pytest.approx(3.0, abs=0.5)
    a = gae(np.ones(5, np.float32), v[0, 10:16].numpy(), 0.9, 0.8)
    np.testing.assert_allclose(
        data["value_targets"].numpy()[0, 10:15], a + v[0, 10:15].numpy(), atol=1e-4
    )
    mean, std = module.vf.stats()
    targets = data["value_targets"][data[Columns.LOSS_MASK]]
    if value_norm:  # first update: the statistics are the batch's own
        assert float(mean) == pytest.approx(float(targets.mean()), rel=1e-4)
        assert float(std) == pytest.approx(float(targets.std(unbiased=False)), rel=1e-3)
    else:
        assert (float(mean), float(std)) == (0.0, 1.0)


def test_advantages_are_standardized_over_the_loss_steps_only():
    """Rows of 12, 7 and 3 new steps, one after a 6-step lookback: on the loss mask the
    advantages have mean 0 and std 1; the lookback steps and the padding hold exactly 0 (so
    neither can enter the statistics unnoticed)."""
    rng = np.random.default_rng(4)
    chunk = _episode(6, rng).cut(len_lookback_buffer=50)
    for _ in range(12):
        chunk.add_env_step(
            observation=rng.normal(size=5).astype(np.float32),
            action=int(rng.integers(3)),
            reward=float(rng.normal() + 2.0),
            extra_model_outputs={
                Columns.ACTION_LOGP: np.float32(-1.1),
                Columns.ACTION_DIST_INPUTS: np.zeros(3, np.float32),
            },
        )
    episodes = [chunk.to_numpy(), _episode(7, rng).to_numpy(), _episode(3, rng).to_numpy()]
    data = MemoTrialBatch(gamma=0.9, lambda_=0.8)(
        rl_module=_module(0), batch={}, episodes=episodes
    )["default_policy"]
    adv = data["advantages"].numpy()
    mask = data[Columns.LOSS_MASK].numpy()
    assert mask.sum(1).tolist() == [12, 7, 3] and not mask[0, :6].any()
    assert adv[mask].mean() == pytest.approx(0.0, abs=1e-5)
    assert adv[mask].std() == pytest.approx(1.0, rel=1e-4)
    assert not adv[~mask].any()


def test_learner_rejects_chunks_without_their_trial_start():
    rng = np.random.default_rng(2)
    second = _episode(6, rng).cut(len_lookback_buffer=2)
    second.add_env_step(
        observation=np.zeros(5, np.float32),
        action=0,
        reward=0.0,
        extra_model_outputs={
            Columns.ACTION_LOGP: np.float32(0.0),
            Columns.ACTION_DIST_INPUTS: np.zeros(3, np.float32),
        },
    )
    with pytest.raises(ValueError, match="max_trial_len"):
        MemoTrialBatch()(rl_module=_module(0), batch={}, episodes=[second.to_numpy()])


def test_acting_draws_a_segment_length_per_sync_and_the_loss_pass_uses_it():
    import random

    module = _module(0, l_seg=10)
    rng = random.Random(0)
    seen = {module.draw_seg_len(rng) for _ in range(200)}
    assert min(seen) >= 8 and max(seen) <= 11 and len(seen) > 2
    assert _module(0, l_seg=10, seg_randomization=False).draw_seg_len(rng) == 10
    # Each weight sync draws the length acting uses from then on, and records it per step.
    lengths = set()
    for _ in range(6):
        module.set_state(module.get_state())
        obs = np.zeros((2, 5), np.float32)
        out = module.forward_exploration(
            {Columns.OBS: torch.from_numpy(obs), MEMO_TRIAL_T: torch.tensor([0, 0])}
        )
        assert out[MEMO_SEG_LEN].tolist() == [module._acting_seg] * 2
        assert module.keeper.cache.l_seg == module._acting_seg
        lengths.add(module._acting_seg)
    assert len(lengths) > 1
    # Greedy acting uses l_seg.
    out = module.forward_inference(
        {Columns.OBS: torch.zeros(2, 5), MEMO_TRIAL_T: torch.tensor([0, 0])}
    )
    assert out[MEMO_SEG_LEN].tolist() == [10, 10]


def test_acting_and_the_loss_pass_compute_the_same_logits_with_a_drawn_length():
    """A trial acted step by step with the drawn length gives, in a loss pass over the recorded
    rows, the same action logits: PPO's ratio is 1 before an update."""
    rng = np.random.default_rng(3)
    module = _module(0, l_seg=6)
    module._acting_seg = 7
    obs = rng.normal(size=(2, 25, 5)).astype(np.float32)
    acted = [_act(module, obs[:, t], [t, t]) for t in range(25)]
    acted = torch.stack(acted, dim=1)
    batch = {Columns.OBS: torch.from_numpy(obs), MEMO_SEG_LEN: torch.tensor([7, 7])}
    with torch.no_grad():
        train = module.forward_train(batch)[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(train, acted, atol=1e-4, rtol=1e-4)
    with torch.no_grad():  # another length would not match: the test can fail
        other = module.forward_train({**batch, MEMO_SEG_LEN: torch.tensor([6, 6])})
    assert (other[Columns.ACTION_DIST_INPUTS] - acted).abs().max() > 1e-3
    # Rows with different lengths in one batch each get their own.
    with torch.no_grad():
        mixed = module.forward_train({**batch, MEMO_SEG_LEN: torch.tensor([7, 6])})
    torch.testing.assert_close(mixed[Columns.ACTION_DIST_INPUTS][0], acted[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(
        mixed[Columns.ACTION_DIST_INPUTS][1],
        other[Columns.ACTION_DIST_INPUTS][1],
        atol=1e-5,
        rtol=0,
    )


def test_an_acting_module_stays_in_eval_mode_and_a_learning_one_switches():
    """An env runner's module (inference_only) starts in eval mode and stays there through
    RLlib's eval()/train() around each acting call; a learner's module switches as usual."""
    torch.manual_seed(0)
    runner = MemoRLModule(
        observation_space=OBS, action_space=ACT, inference_only=True, model_config=CONFIG
    )
    assert not any(m.training for m in runner.modules())
    _act(runner, np.zeros((2, 5), np.float32), [0, 0])
    runner.train()
    assert not any(m.training for m in runner.modules())
    learner = _module(0)
    assert learner.training
    _act(learner, np.zeros((2, 5), np.float32), [0, 0])
    assert all(m.training for m in learner.modules())  # RLlib's toggle put it back
    learner.eval()
    assert not any(m.training for m in learner.modules())


@pytest.mark.parametrize("critic", ["shared", "detached", "separate"])
def test_critic_modes_route_the_value_gradient(critic):
    module = _module(0, critic=critic, vf_hiddens=[8])
    obs = torch.randn(2, 9, 5)
    out = module.forward_train({Columns.OBS: obs})
    out["memo_vf_preds"].sum().backward()
    trunk = sum(p.grad.abs().sum() for p in module.net.parameters() if p.grad is not None)
    head = module.vf.weight.grad.abs().sum()
    assert head > 0
    if critic == "shared":
        assert trunk > 0
    else:
        assert trunk == 0  # the value loss never reaches the policy's trunk
    if critic == "separate":
        assert any(
            p.grad is not None and p.grad.abs().sum() > 0 for p in module.critic_net.parameters()
        )


def test_settings_validate_and_reject_unknown_keys():
    from memrl.experiment.config import parse_config

    exp = parse_config(
        {
            "env": {"id": "memrl/MemoryCorridor-v0", "config": {"length": 4}},
            "model": {"type": "memo", "mode": "rmt", "l_seg": 8},
        }
    )
    assert isinstance(exp.model, MemoModelSettings) and exp.model.mode == "rmt"
    assert exp.model.trial_len(exp) == 5
    with pytest.raises(ValueError, match="mode"):
        parse_config({"model": {"type": "memo", "mode": "gru"}})
    with pytest.raises(ValueError, match="l_seq"):
        parse_config({"model": {"type": "memo", "l_seq": 8}})
    with pytest.raises(ValueError, match="grad_diagnostics_every must be >= 0"):
        parse_config({"model": {"type": "memo", "grad_diagnostics_every": -1}})
    with pytest.raises(ValueError, match="learner_precision must be one of"):
        parse_config({"model": {"type": "memo", "learner_precision": "float16"}})


@pytest.mark.slow
def test_trains_through_rllib_on_the_corridor(tmp_path):
    import ray

    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.config import parse_config

    exp = parse_config(
        {
            "env": {
                "id": "memrl/MemoryCorridor-v0",
                "config": {"length": 6, "episodes_per_trial": 2},
            },
            "algorithm": {
                "name": "ppo",
                "train_batch_size": 112,
                "minibatch_size": 28,
                "num_epochs": 1,
            },
            "model": {
                "type": "memo",
                "d_model": 16,
                "n_layers": 1,
                "n_heads": 2,
                "l_seg": 4,
                "l_sum": 2,
                "encoder_hiddens": [16],
                "partial_update_steps": 5,
            },
            "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 2},
        }
    )
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        algo = build_algorithm_config(exp).build_algo()
        results = [algo.train() for _ in range(2)]
        result = results[-1]
        learner = result["learners"]["default_policy"]
        assert np.isfinite(learner["total_loss"]) and learner["num_module_steps_trained"] > 0
        # Acting (segment length drawn at the sync) and the loss pass compute the same thing:
        # before the update every ratio is 1.
        assert learner["ratio_dev_pre_update"] < 1e-3 and learner["clip_frac_pre_update"] == 0
        # The env runner's KV cache: at most 3 summary blocks of 2 (segments of 3-4 steps in a
        # 14-step trial) plus a segment; bytes = tokens x layers x (K, V) x d_model x 4 bytes.
        runners = result["env_runners"]
        tokens = runners["memory/kv_cache_tokens_peak"]
        assert 4 <= tokens <= 3 * 2 + 4
        assert runners["memory/kv_cache_bytes_peak"] == tokens * 1 * 2 * 16 * 4
        for key in ("vf_explained_var", "vf_ev_q1", "vf_ev_q4", "value_norm_std"):
            assert key in learner
        # The trunk gradient norms: on the first update, then every grad_diagnostics_every (10)
        # updates; nan in between.
        first = results[0]["learners"]["default_policy"]
        assert first["trunk_grad_norm_pi"] > 0 and first["trunk_grad_norm_vf"] > 0
        assert np.isnan(learner["trunk_grad_norm_pi"]) and np.isnan(learner["trunk_grad_norm_vf"])
        assert result["env_runners"]["num_episodes_lifetime"] > 0
        algo.stop()
    finally:
        ray.shutdown()


@needs_cxx
def test_compile_learner_trains_like_eager_and_keeps_the_state_dict():
    from memrl.methods.memo.columns import VF_PREDS

    eager, compiled = (
        _module(0, critic="separate"),
        _module(1, critic="separate", compile_learner=True),
    )
    compiled.load_state_dict(eager.state_dict())
    assert compiled.state_dict().keys() == eager.state_dict().keys()
    runner = MemoRLModule(
        observation_space=OBS,
        action_space=ACT,
        inference_only=True,
        model_config={**CONFIG, "compile_learner": True},
    )
    assert runner._compiled is None  # env runners act eagerly
    obs = torch.randn(3, 11, OBS.shape[0])
    outs, grads = [], []
    for module in (eager, compiled):
        out = module.forward_train({Columns.OBS: obs})
        loss = out[Columns.ACTION_DIST_INPUTS].square().mean() + out[VF_PREDS].square().mean()
        # The learner's diagnostics: a gradient that keeps the graph, before the loss backward.
        torch.autograd.grad(loss, list(module.net.parameters()), retain_graph=True)
        loss.backward()
        outs.append(out)
        grads.append({n: p.grad for n, p in module.named_parameters() if p.grad is not None})
    # Both trunks (policy and separate critic) are compiled, and compute what eager does.
    assert len(compiled._compiled) == 2
    for key in (Columns.ACTION_DIST_INPUTS, VF_PREDS):
        torch.testing.assert_close(outs[1][key], outs[0][key], rtol=1e-5, atol=1e-6)
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-4, atol=1e-6)
    # After an update, the compiled trunk reads the new weights (nothing of the old ones is
    # baked into its graph), also at another batch size.
    after = []
    for module in (eager, compiled):
        torch.optim.SGD(module.parameters(), lr=0.5).step()
        with torch.no_grad():
            after.append(module.forward_train({Columns.OBS: obs[:2]}))
    moved = (after[0][VF_PREDS] - outs[0][VF_PREDS][:2]).abs().max()
    assert moved > 1e-3  # the step changed the outputs by far more than the tolerance
    for key in (Columns.ACTION_DIST_INPUTS, VF_PREDS):
        torch.testing.assert_close(after[1][key], after[0][key], rtol=1e-5, atol=1e-6)


def test_bfloat16_learner_trains_near_float32_and_acts_in_float32():
    from memrl.methods.memo.columns import VF_PREDS

    full, half = _module(0, critic="separate"), _module(1, critic="separate", **BF16)
    half.load_state_dict(full.state_dict())
    assert half.state_dict().keys() == full.state_dict().keys()
    obs = torch.randn(3, 11, OBS.shape[0])
    outs, grads = [], []
    for module in (full, half):
        out = module.forward_train({Columns.OBS: obs})
        loss = out[Columns.ACTION_DIST_INPUTS].square().mean() + out[VF_PREDS].square().mean()
        loss.backward()
        outs.append(out)
        grads.append(
            torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])
        )
    for key in (Columns.ACTION_DIST_INPUTS, VF_PREDS):
        # The heads read float32 features; the trunk's matmuls ran in bfloat16 (8-bit mantissa):
        # close to float32, and not equal to it.
        assert outs[1][key].dtype == torch.float32
        err = (outs[1][key] - outs[0][key]).abs().max()
        assert 0 < err < 0.05 * outs[0][key].abs().max()
    assert all(p.dtype == torch.float32 for p in half.parameters())
    cosine = torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0)
    assert cosine > 0.99
    # The values pass (GAE, decoupled PPO's logits) runs like the loss pass.
    values, logits = half.values_and_logits({Columns.OBS: obs})
    torch.testing.assert_close(logits, outs[1][Columns.ACTION_DIST_INPUTS])

    # An env runner's module acts in float32: exactly what a float32 module acts.
    runners = [
        MemoRLModule(observation_space=OBS, action_space=ACT, inference_only=True, model_config=c)
        for c in (CONFIG, {**CONFIG, **BF16})
    ]
    for runner in runners:
        runner.set_state(full.get_state(inference_only=True))
    step = torch.randn(2, OBS.shape[0]).numpy()
    torch.testing.assert_close(
        _act(runners[1], step, [0, 0]), _act(runners[0], step, [0, 0]), rtol=0, atol=0
    )


BF16 = {"learner_precision": "bfloat16"}


def test_attention_runs_in_float32_under_cpu_autocast():
    from memrl.methods.memo.layers import self_attend

    q, k, v = (torch.randn(2, 2, 6, 8, requires_grad=True) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = self_attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True)
    assert got.dtype == torch.float32  # CPU's bfloat16 attention backward is ~10x slower
    torch.testing.assert_close(got, want, rtol=0.02, atol=0.02)
    got.sum().backward()
    assert q.grad is not None and q.grad.dtype == torch.float32
