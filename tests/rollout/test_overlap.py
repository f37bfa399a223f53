"""Overlapped sampling (``resources.overlap_sampling``): PPO trains on the batch sampled during
the previous step while a thread (or a remote env runner) samples the next one, on a real local
Ray; Memo's learner trains such a batch with decoupled PPO, which it knows from the mark the step
puts on it (checked without Ray)."""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import ray
from memrl_testing import TINY_MEMO, bulk_config
from ray import cloudpickle
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, LEARNER_RESULTS
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from memrl.experiment.build import build_algorithm_config
from memrl.experiment.config import parse_config
from memrl.experiment.progress import metrics_row
from memrl.methods.memo.bulk_runner import MemoBulkEnvRunner
from memrl.rollout.arrays import ACTED_BEHIND, Rollout
from memrl.rollout.learner import rollouts_in
from memrl.rollout.overlap import OverlappedPPO

MLP = {"type": "mlp", "hiddens": [16]}


class _DriverRunner:
    """The driver's env runner (num_env_runners 0) reduced to what a training step reads: each
    sample is a fresh one-env rollout of two steps."""

    env = "an env"

    def sample(self, num_timesteps: int) -> list[Rollout]:
        space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        return [Rollout.empty(2, 1, space, gym.spaces.Discrete(2), 2)]

    def get_metrics(self) -> dict:
        return {}


class _DriverOnly:
    """An env runner group of the driver's runner alone."""

    local_env_runner = _DriverRunner()

    def num_remote_workers(self) -> int:
        return 0

    def sync_weights(self, **kwargs) -> None:
        pass


def test_a_batch_sampled_during_the_last_update_reaches_the_learner_marked_acted_behind():
    """No Ray: OverlappedPPO's training step with the driver's runner, the learner update
    replaced by a record of what it gets. The first batch is sampled on the spot and trains as
    acted on time; each later one, sampled by the thread during the update before, is marked
    ``ACTED_BEHIND`` (so Memo's learner trains it with decoupled PPO)."""
    algo = OverlappedPPO.__new__(OverlappedPPO)  # the step's own state, without RLlib's setup
    algo.env_runner_group = _DriverOnly()
    algo.config = SimpleNamespace(total_train_batch_size=2)
    algo.metrics = MetricsLogger()
    algo.learner_group = None
    marks = []

    def update(samples):
        marks.append([bool(r.extras.get(ACTED_BEHIND)) for r in rollouts_in(samples)])
        return [{"default_policy": {}}]

    algo._update = update
    for _ in range(3):
        algo.training_step()
    assert marks == [[False], [True], [True]]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _algo(overlap: bool, sampler: str = "bulk", **resources):
    config = bulk_config(
        sampler,
        TINY_MEMO,
        envs=4,
        steps=120,
        minibatch=60,
        seed=1,
        overlap_sampling=overlap,
        **resources,
    )
    return config.build_algo()


def _lags(algo, iterations: int) -> list[int]:
    """Per iteration, the metrics row's ``acting_lag``: weight versions between the policy that
    acted the trained batch and the learner's before the update."""
    out = []
    for _ in range(iterations):
        out.append(int(metrics_row(algo.train(), algo)["acting_lag"]))
    return out


def test_each_batch_is_acted_one_weight_version_behind(local_ray):
    serial, overlapped, episodes = _algo(False), _algo(True), _algo(False, "episodes")
    try:
        assert _lags(episodes, 2) == [0, 0]  # RLlib's own env runner and learner
        assert not isinstance(serial, OverlappedPPO)
        assert isinstance(overlapped, OverlappedPPO)
        assert _lags(serial, 4) == [0, 0, 0, 0]
        # The first batch is sampled on the spot; each later one during the update before.
        assert _lags(overlapped, 4) == [0, 1, 1, 1]
        result = overlapped.train()
        assert result[ENV_RUNNER_RESULTS]["num_env_steps_sampled_lifetime"] >= 5 * 120
        assert result[LEARNER_RESULTS]["__all_modules__"]["num_env_steps_trained_lifetime"] >= (
            5 * 120
        )
    finally:
        serial.stop()
        overlapped.stop()
        episodes.stop()


def test_an_env_failure_in_the_sampling_thread_ends_the_step_with_its_error(local_ray):
    config = bulk_config(
        "bulk", TINY_MEMO, envs=4, steps=120, minibatch=60, seed=1, overlap_sampling=True
    )
    config.fault_tolerance(restart_failed_sub_environments=False)
    algo = config.build_algo()
    try:
        algo.train()  # the next batch is being sampled in the thread from here on
        env = algo.env_runner.env.env

        def failing(actions):
            raise RuntimeError("injected")

        env.step = failing
        with pytest.raises(RuntimeError, match="env step failed"):
            algo.train()
    finally:
        algo.stop()


def test_a_restore_drops_the_batch_sampled_ahead(local_ray, tmp_path):
    algo = _algo(True)
    try:
        algo.train()
        algo.save_to_path(str(tmp_path / "ckpt"))
        algo.train()
        assert algo._ahead is not None
        algo.restore_from_path(str(tmp_path / "ckpt"))
        assert algo._ahead is None
        assert _lags(algo, 2) == [0, 1]
    finally:
        algo.stop()


def test_remote_runners_sample_the_next_batch_during_the_update(local_ray, tmp_path):
    algo = _algo(True, num_env_runners=1)
    try:
        assert algo.env_runner_group.num_remote_workers() == 1
        assert algo.env_runner_group.local_env_runner.env is None
        assert _lags(algo, 4) == [0, 1, 1, 1]
        algo.save_to_path(str(tmp_path / "ckpt"))
        algo.train()
        assert algo._remote_ahead == 1  # a sample request in flight
        algo.restore_from_path(str(tmp_path / "ckpt"))
        assert algo._remote_ahead == 0
        assert _lags(algo, 2) == [0, 1]
    finally:
        algo.stop()


class _SlowWeights(MemoBulkEnvRunner):
    """A runner that takes its new weights slower than the learner's update (a loaded machine)."""

    def set_state(self, state):
        time.sleep(0.4)
        super().set_state(state)


def test_new_weights_are_not_dropped_while_the_last_ones_are_still_loading(local_ray):
    # RLlib keeps one weight sync per runner in flight and drops the next; without waiting for
    # the last one, every other batch would be acted two versions behind.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        config = bulk_config(
            "bulk",
            TINY_MEMO,
            envs=4,
            steps=120,
            minibatch=60,
            seed=1,
            overlap_sampling=True,
            num_env_runners=1,
        )
        algo = config.env_runners(env_runner_cls=_SlowWeights).build_algo()
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    try:
        assert _lags(algo, 5) == [0, 1, 1, 1, 1]
    finally:
        algo.stop()


def test_a_remote_runner_lost_while_sampling_ahead_is_replaced(local_ray):
    algo = _algo(True, num_env_runners=1)
    group = algo.env_runner_group
    try:
        algo.train()
        (before,) = group.foreach_env_runner(lambda r: os.getpid(), local_env_runner=False)
        # Queued behind the sample in flight: the runner's next sample kills its process.
        group.foreach_env_runner(
            lambda r: setattr(r.env.env, "step", lambda actions: os._exit(1)),
            local_env_runner=False,
        )
        algo.train()  # trains the batch sampled before; the runner dies sampling the next
        trained = []
        for _ in range(4):
            result = algo.train()
            trained.append(result[LEARNER_RESULTS]["__all_modules__"]["num_env_steps_trained"])
        assert result[ENV_RUNNER_RESULTS]["num_env_steps_sampled_lifetime"] >= 4 * 120
        assert group.num_healthy_remote_workers() == 1
        (after,) = group.foreach_env_runner(lambda r: os.getpid(), local_env_runner=False)
        assert after != before  # a new runner process
        assert trained[-1] >= 120, trained  # training goes on with the restarted runner
    finally:
        algo.stop()


def test_overlap_refused_off_the_bulk_path():
    with pytest.raises(ValueError, match="sampler"):
        parse_config({"resources": {"overlap_sampling": True, "sampler": "episodes"}})
    cartpole = parse_config(
        {"env": {"id": "CartPole-v1"}, "model": MLP, "resources": {"overlap_sampling": True}}
    )
    with pytest.raises(ValueError, match="needs the bulk path.*no native vector form"):
        build_algorithm_config(cartpole)
    mlp = parse_config({"model": MLP, "resources": {"overlap_sampling": True}})
    with pytest.raises(ValueError, match="Memo models only"):
        build_algorithm_config(mlp)
