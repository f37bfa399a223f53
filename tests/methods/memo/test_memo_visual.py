"""Memo with a frozen image encoder: features made once per step, reused by refresh and learner."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from memrl_testing import TINY_MEMO
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from memrl.methods.memo.batch import MemoTrialBatch
from memrl.methods.memo.columns import MEMO_FROZEN_FEATURES, MEMO_TRIAL_T
from memrl.methods.memo.frozen_encoder import FrozenImageEncoder
from memrl.methods.memo.rlmodule import MemoRLModule

torch.set_num_threads(1)  # small shared machines: one thread per test process

# A 2x3 patch of 2 channels (12 values) at obs[3:15], 4 other observation values around it.
OBS_DIM = 19
OBS = gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
ACT = gym.spaces.Discrete(3)
CONFIG = dict(
    d_model=16,
    n_layers=1,
    n_heads=2,
    l_seg=4,
    l_sum=2,
    encoder_hiddens=[16],
    image_slice=[3, 15],
    image_shape=[2, 3, 2],
    image_channels=[4],
    image_features=6,
    image_seed=7,
)


def _module(seed: int, **kw) -> MemoRLModule:
    torch.manual_seed(seed)
    return MemoRLModule(observation_space=OBS, action_space=ACT, model_config={**CONFIG, **kw})


def _act(module: MemoRLModule, obs: np.ndarray, trial_t: list[int]) -> dict:
    batch = {Columns.OBS: torch.from_numpy(obs), MEMO_TRIAL_T: torch.tensor(trial_t)}
    return module.forward_exploration(batch)


def _count_calls(layer: torch.nn.Module) -> list[int]:
    calls = [0]
    layer.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_frozen_encoder_is_seeded_and_has_no_parameters():
    a = FrozenImageEncoder((2, 3, 2), (4, 8), 5, seed=1)
    b = FrozenImageEncoder((2, 3, 2), (4, 8), 5, seed=1)
    c = FrozenImageEncoder((2, 3, 2), (4, 8), 5, seed=2)
    x = torch.randn(3, 7, 12)
    assert a(x).shape == (3, 7, 5)
    assert torch.equal(a(x), b(x)) and not torch.allclose(a(x), c(x))
    assert list(a.parameters()) == [] and not a(x.requires_grad_()).requires_grad
    assert set(a.state_dict()) == {"conv0", "conv1", "proj"}  # travels with weight syncs
    with pytest.raises(ValueError, match="H\\*W\\*C = 12"):
        a(torch.randn(4, 13))


def test_module_rejects_an_image_slice_that_does_not_fit():
    with pytest.raises(ValueError, match="image_slice"):
        _module(0, image_slice=[3, 14])
    with pytest.raises(ValueError, match="image_slice"):
        _module(0, image_slice=[10, 22])


def test_acting_returns_the_frozen_features_of_each_step():
    module = _module(0)
    obs = np.random.default_rng(0).normal(size=(2, OBS_DIM)).astype(np.float32)
    out = _act(module, obs, [0, 0])
    want = module.visual(torch.from_numpy(obs[:, 3:15]))
    assert torch.equal(out[MEMO_FROZEN_FEATURES], want)
    # The trainable encoder sees [frozen features, obs[:3], obs[15:]] (6 + 7 values).
    assert module.encoder[0].in_features == 6 + OBS_DIM - 12


def test_kv_refresh_reuses_stored_features_and_equals_a_fresh_recompute():
    rng = np.random.default_rng(1)
    runner = _module(0)
    image_calls = _count_calls(runner.visual)
    encoder_calls = _count_calls(runner.encoder)
    history: dict[int, list[np.ndarray]] = {0: [], 1: []}
    trial_t = [0, 0]
    for step in range(10):  # 2 full segments + 2 steps; slot 1 starts a new trial at step 3
        obs = rng.normal(size=(2, OBS_DIM)).astype(np.float32)
        if step == 3:
            trial_t[1], history[1] = 0, []
        for i in range(2):
            history[i].append(obs[i])
        _act(runner, obs, trial_t)
        trial_t = [t + 1 for t in trial_t]
    assert image_calls[0] == 10  # one image encode per acting step (both slots at once)

    runner.set_state(_module(1).get_state())  # a weight sync: triggers the KV refresh
    assert image_calls[0] == 10  # the refresh encoded no image again...
    assert encoder_calls[0] == 10 + 2  # ...but ran the new trainable encoder once per slot

    # A fresh recompute: each slot's trial replayed step by step under the new weights.
    replays = []
    for i in range(2):
        replay = _module(1)
        for t, o in enumerate(history[i]):
            _act(replay, o[None], [t])
        assert runner.net.cache_tokens(replay.keeper.cache) == replay.net.cache_tokens(
            replay.keeper.cache
        )
        replays.append(replay)
    # Caches are equal iff every next output agrees: step on across the next segment boundary.
    for _ in range(6):
        obs = rng.normal(size=(2, OBS_DIM)).astype(np.float32)
        got = _act(runner, obs, trial_t)[Columns.ACTION_DIST_INPUTS]
        for i in range(2):
            want = _act(replays[i], obs[i : i + 1], [trial_t[i]])[Columns.ACTION_DIST_INPUTS]
            torch.testing.assert_close(got[i : i + 1], want, atol=1e-5, rtol=1e-5)
        trial_t = [t + 1 for t in trial_t]


def _episode(module: MemoRLModule, n_steps: int, rng: np.random.Generator) -> SingleAgentEpisode:
    """An episode as an env runner records it: the acting outputs kept as extra model outputs."""
    ep = SingleAgentEpisode(observation_space=OBS, action_space=ACT)
    obs = rng.normal(size=OBS_DIM).astype(np.float32)
    ep.add_env_reset(observation=obs)
    for t in range(n_steps):
        out = _act(module, obs[None], [t])
        obs = rng.normal(size=OBS_DIM).astype(np.float32)
        ep.add_env_step(
            observation=obs,
            action=int(rng.integers(3)),
            reward=float(rng.normal()),
            extra_model_outputs={
                Columns.ACTION_LOGP: np.float32(-1.1),
                Columns.ACTION_DIST_INPUTS: out[Columns.ACTION_DIST_INPUTS][0].detach().numpy(),
                MEMO_FROZEN_FEATURES: out[MEMO_FROZEN_FEATURES][0].numpy(),
            },
        )
    return ep


def test_learner_batch_takes_the_stored_features_and_encodes_only_the_bootstrap_step():
    rng = np.random.default_rng(2)
    module = _module(0)
    first = _episode(module, 6, rng)
    second = first.cut(len_lookback_buffer=50)
    for t in range(6, 9):
        second.add_env_step(
            observation=rng.normal(size=OBS_DIM).astype(np.float32),
            action=1,
            reward=1.0,
            extra_model_outputs={
                Columns.ACTION_LOGP: np.float32(-0.5),
                Columns.ACTION_DIST_INPUTS: np.zeros(3, np.float32),
                # Marked features (a re-encode would give different ones): the learner must
                # take these, lookback included, and encode only the last observation.
                MEMO_FROZEN_FEATURES: np.full(6, 100.0 + t, np.float32),
            },
        )
    second = second.to_numpy()
    image_calls = _count_calls(module.visual)
    data = MemoTrialBatch()(rl_module=module, batch={}, episodes=[second])["default_policy"]
    frozen, obs = data[MEMO_FROZEN_FEATURES], data[Columns.OBS]
    assert frozen.shape == (1, 10, 6)
    assert image_calls[0] == 1  # the bootstrap step only (the value pass used the column)
    reencoded = module.visual(obs[0, :, 3:15])
    torch.testing.assert_close(frozen[0, :6], reencoded[:6])  # lookback: stored while acting
    assert torch.equal(frozen[0, 6:9], torch.arange(106.0, 109.0)[:, None].expand(3, 6))
    torch.testing.assert_close(frozen[0, 9], reencoded[9])  # the bootstrap observation
    # The loss pass reads the column too: its logits follow the marked features.
    with torch.no_grad():
        stored = module.forward_train({Columns.OBS: obs, MEMO_FROZEN_FEATURES: frozen})[
            Columns.ACTION_DIST_INPUTS
        ]
        fresh = module.forward_train({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    assert not torch.allclose(stored[0, 6:9], fresh[0, 6:9], atol=1e-3)


def test_settings_resolve_image_obs_from_the_env():
    from memrl.experiment.config import parse_config

    env = {"id": "memrl/ObjNav-v0", "config": {"grid_size": 12, "num_categories": 4}}
    exp = parse_config({"env": env, "model": {"type": "memo", "image_obs": "view"}})
    mc = exp.model.model_config(exp)
    # view radius 4: a 4 x 9 patch of 2 + 4 channels at the start of the observation.
    assert mc["image_slice"] == [0, 4 * 9 * 6] and mc["image_shape"] == [4, 9, 6]
    bad = parse_config({"env": env, "model": {"type": "memo", "image_obs": "rgb"}})
    with pytest.raises(ValueError, match="'view'"):
        bad.model.model_config(bad)


@pytest.mark.slow
def test_learner_updates_leave_the_frozen_encoder_unchanged():
    import ray

    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.config import parse_config

    exp = parse_config(
        {
            "env": {
                "id": "memrl/ObjNav-v0",
                "config": {"grid_size": 10, "rooms": 2, "num_categories": 3, "trial_len": 48},
            },
            "algorithm": {
                "name": "ppo",
                "train_batch_size": 48,
                "minibatch_size": 24,
                "num_epochs": 2,
            },
            "model": {
                **TINY_MEMO,
                "image_obs": "view",
                "image_channels": [4],
                "image_features": 8,
                "partial_update_steps": 24,
            },
            "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 2},
        }
    )
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        algo = build_algorithm_config(exp).build_algo()
        weights = algo.learner_group.get_weights()["default_policy"]
        before = {k: np.array(v) for k, v in weights.items()}
        for _ in range(3):  # 3 partial updates: the trials' chunks carry their lookback
            result = algo.train()
        after = algo.learner_group.get_weights()["default_policy"]
        # The env runner keeps each step's frozen features in its episodes.
        episodes = algo.env_runner.sample(num_timesteps=4, explore=True)
        algo.stop()
    finally:
        ray.shutdown()
    assert result["learners"]["default_policy"]["num_module_steps_trained"] > 0
    kept = np.asarray(episodes[0].get_extra_model_outputs(MEMO_FROZEN_FEATURES))
    assert kept.shape[-1] == 8 and np.isfinite(kept).all() and np.abs(kept).sum() > 0
    frozen = [k for k in before if k.startswith("visual.")]
    assert sorted(frozen) == ["visual.conv0", "visual.proj"]
    for k in frozen:
        np.testing.assert_array_equal(after[k], before[k])
    assert not np.allclose(after["encoder.0.weight"], before["encoder.0.weight"])
