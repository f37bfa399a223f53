"""Per-inner-episode metrics read at the trial's end from every chunk of the trial."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from memrl.callbacks import InnerEpisodeMetrics
from memrl.config import build_algorithm_config, parse_config


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
        if k <= 10:
            assert sum(returns) == pytest.approx(trial_return)
