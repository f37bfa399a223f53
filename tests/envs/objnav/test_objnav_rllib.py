"""ObjNav-lite under RLlib's new API stack: PPO trains on trials, in process and via a worker."""

from __future__ import annotations

import math

import pytest

ray = pytest.importorskip("ray")

SMALL = {"trial_len": 128, "grid_size": 16, "num_categories": 5, "seed": 0}


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id, env_config",
    [
        ("memrl/ObjNav-v0", SMALL),
        ("memrl/Habitat-v0", {"backend": "objnav", "task": SMALL}),
    ],
)
def test_ppo_trains_one_iteration(ray_local, env_id, env_config):
    from ray.rllib.algorithms.ppo import PPOConfig

    import memrl.envs  # noqa: F401  (registers the env ids in this process)

    config = (
        PPOConfig()
        .environment(env_id, env_config=env_config)
        .env_runners(num_env_runners=0, rollout_fragment_length=128)
        .training(train_batch_size_per_learner=256, minibatch_size=128, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [32]})
    )
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    runners = result["env_runners"]
    assert result["num_env_steps_sampled_lifetime"] >= 256
    assert runners["num_episodes"] >= 1  # one RLlib episode = one 128-step trial
    assert math.isfinite(runners["episode_return_mean"])
    assert runners["episode_len_mean"] == 128
