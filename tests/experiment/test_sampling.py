"""The sampling path: inner-episode metrics read at the trial's end from every chunk, and the lean
module-to-env connectors of the MLP model."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from memrl.experiment.build import build_algorithm_config
from memrl.experiment.callbacks import InnerEpisodeMetrics
from memrl.experiment.config import parse_config


@pytest.mark.parametrize("mode", ["vector", "sync"])
def test_inner_episodes_counted_once_across_chunks(mode):
    """Trials cut into 7-step chunks (cuts fall on inner-episode ends too): each inner episode
    is counted once, and the inner returns add up to the trial's return."""
    exp = parse_config(
        {
            "env": {"config": {"size": 3, "episode_len": 4, "trial_len": 60}},
            "model": {"type": "mlp", "hiddens": [8]},
            "resources": {
                "num_envs_per_env_runner": 3,
                "rollout_fragment_length": 7,
                "env_vectorize_mode": mode,
            },
        }
    )
    runner = SingleAgentEnvRunner(config=build_algorithm_config(exp))
    chunks: dict[str, list] = {}
    for _ in range(40):
        for ep in runner.sample(num_timesteps=21, random_actions=True):
            chunks.setdefault(ep.id_, []).append(ep)
    runner.stop()
    whole = [c for c in chunks.values() if c[-1].is_done and c[0].t_started == 0]
    assert len(whole) >= 3
    for trial in whole:
        logger = MetricsLogger()
        InnerEpisodeMetrics().on_episode_end(
            episode=trial[-1], metrics_logger=logger, prev_episode_chunks=trial[:-1]
        )
        stats = logger.reduce()
        # Every inner episode but the last starts with a soft reset: the obs flag (last entry).
        obs = np.concatenate([np.asarray(c.get_observations())[1:] for c in trial])
        assert stats["inner_episodes"] == int(obs[:, -1].sum()) + 1
        trial_return = sum(float(np.sum(c.get_rewards())) for c in trial)
        k = int(stats["inner_episodes"])
        returns = [stats[f"inner_return_{i}"] for i in range(min(k, 10))]
        # One trial: the mean square of index k is its return squared (the summary's spread).
        for i in range(min(k, 5)):
            assert float(stats[f"inner_return_sq_{i}"].peek()) == pytest.approx(
                float(returns[i].peek()) ** 2
            )
        if k <= 10:
            assert sum(returns) == pytest.approx(trial_return)


def _sampled(lean: bool) -> list:
    import torch

    exp = parse_config(
        {
            "env": {"config": {"size": 4, "episode_len": 6, "trial_len": 30}},
            "model": {"type": "mlp", "hiddens": [16], "lean_connectors": lean},
            "resources": {"num_envs_per_env_runner": 5},
            "run": {"seed": 3},
        }
    )
    config = build_algorithm_config(exp)
    assert config.add_default_connectors_to_module_to_env_pipeline is not lean
    runner = SingleAgentEnvRunner(config=config)
    torch.manual_seed(0)
    episodes = runner.sample(num_timesteps=200, explore=True)
    episodes += runner.sample(num_episodes=3, explore=False)
    runner.stop()
    return episodes


def test_lean_module_to_env_connectors_sample_exactly_what_the_default_ones_do():
    """Arrays over envs instead of per-env items: the same actions, log-probs and episodes."""
    lean, default = _sampled(True), _sampled(False)
    assert len(lean) == len(default) > 0
    for a, b in zip(lean, default, strict=True):
        np.testing.assert_array_equal(np.asarray(a.get_observations()), b.get_observations())
        np.testing.assert_array_equal(np.asarray(a.get_actions()), b.get_actions())
        np.testing.assert_array_equal(np.asarray(a.get_rewards()), b.get_rewards())
        for key in ("action_logp", "action_dist_inputs"):
            np.testing.assert_allclose(
                np.asarray(a.get_extra_model_outputs(key)),
                np.asarray(b.get_extra_model_outputs(key)),
                rtol=0,
                atol=0,
            )
