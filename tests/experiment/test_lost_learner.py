"""A remote learner that dies ends training with RunInterrupted and how to resume, whichever of
RLlib's paths meets the dead actor first (real local Ray, the learner actor killed)."""

from __future__ import annotations

import time

import pytest
import ray

from memrl.experiment.build import build_algorithm_config
from memrl.experiment.checkpoints import restore_checkpoint
from memrl.experiment.config import parse_config
from memrl.experiment.interrupts import RunInterrupted, lost_learner_ends_run
from memrl.experiment.learner_health import learners_lost
from memrl.experiment.run_dir import POLICY_MODULE, RunDir


def test_an_update_that_skips_a_dead_learner_is_a_lost_learner(tmp_path):
    exp = parse_config(
        {
            "env": {"id": "memrl/MemoryCorridor-v0", "config": {"length": 4}},
            "algorithm": {"name": "ppo", "train_batch_size": 64, "minibatch_size": 32},
            "model": {"type": "mlp", "hiddens": [8]},
            "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 2, "num_learners": 1},
        }
    )
    run = RunDir(tmp_path / "run")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    algo = None
    try:
        algo = build_algorithm_config(exp).build_algo()
        with lost_learner_ends_run(algo, run, last_saved=0):
            algo.train()  # a healthy learner trains
        assert not learners_lost(algo)
        manager = algo.learner_group._worker_manager
        for actor_id in manager.actor_ids():
            ray.kill(manager._actors[actor_id])
        # A call that meets the dead learner marks it unhealthy; RLlib's next update then skips
        # it and PPO fails on the empty results (IndexError), not with the actor's error.
        # ray.kill returns before the actor is gone: a call may still reach it, so call again.
        deadline = time.monotonic() + 60
        while not learners_lost(algo) and time.monotonic() < deadline:
            algo.learner_group.foreach_learner(lambda learner: None)
            time.sleep(0.2)
        assert learners_lost(algo)
        with pytest.raises(IndexError):
            algo.train()
        with pytest.raises(RunInterrupted, match=r"\(a learner\) was lost") as caught:
            with lost_learner_ends_run(algo, run, last_saved=4):
                algo.train()
        message = str(caught.value)
        assert "0 of 1 learners alive; IndexError" in message
        assert "--resume" in message and "checkpoints up to iteration 4" in message
        # A checkpoint taken now (its learner state cannot be gathered) ends the same way.
        with pytest.raises(RunInterrupted, match=r"0 of 1 learners alive"):
            with lost_learner_ends_run(algo, run, last_saved=4):
                run.save_checkpoint(algo, algo.iteration, 3)
    finally:
        # Stopped here, not left to the garbage collector: an Algorithm collected after
        # ray.shutdown calls into Ray, which starts a new local Ray for the next tests.
        if algo is not None:
            algo.stop()
        ray.shutdown()


def _remote_learner_exp():
    return parse_config(
        {
            "env": {"id": "memrl/MemoryCorridor-v0", "config": {"length": 4}},
            "algorithm": {"name": "ppo", "train_batch_size": 64, "minibatch_size": 32},
            "model": {"type": "mlp", "hiddens": [8]},
            "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 2, "num_learners": 1},
        }
    )


def test_a_learner_lost_while_it_writes_a_checkpoint_leaves_no_checkpoint(tmp_path):
    """RLlib's save returns normally when the learner dies while writing its part (it only marks
    the actor unhealthy), leaving a checkpoint whose learner files are empty or missing. The
    learner is killed right before RLlib asks it to write (after RLlib asked its node), so the
    write meets the dead actor: the save must end the run and keep nothing of that iteration."""
    run = RunDir(tmp_path / "run")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    algo = None
    try:
        algo = build_algorithm_config(_remote_learner_exp()).build_algo()
        algo.train()
        run.save_checkpoint(algo, algo.iteration, 3)  # a healthy save counts
        algo.train()
        manager = algo.learner_group._worker_manager
        forward = manager.foreach_actor
        calls = []

        def kill_before_the_write(func, **kwargs):
            # RLlib asks the learner for its node's address (_get_ip), then has it write.
            if calls and calls[-1] == "_get_ip":
                for actor_id in manager.actor_ids():
                    ray.kill(manager._actors[actor_id])
                time.sleep(2)  # gone before the write reaches it
            calls.append(getattr(func, "__name__", "?"))
            return forward(func, **kwargs)

        manager.foreach_actor = kill_before_the_write
        with pytest.raises(RunInterrupted, match=r"0 of 1 learners alive"):
            with lost_learner_ends_run(algo, run, last_saved=1):
                run.save_checkpoint(algo, algo.iteration, 3)
        assert calls[-2:] == ["_get_ip", "<lambda>"], calls
        assert run.checkpoint_names() == ["iter_000001"]
        assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["iter_000001"]
    finally:
        if algo is not None:
            algo.stop()
        ray.shutdown()


def test_a_damaged_checkpoint_fails_its_restore_on_a_remote_learner_clearly(tmp_path):
    run = RunDir(tmp_path / "run")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    algo = fresh = None
    try:
        algo = build_algorithm_config(_remote_learner_exp()).build_algo()
        algo.train()
        name = run.save_checkpoint(algo, algo.iteration, 3)
        algo.stop()
        algo = None
        weights = tmp_path / "run" / "checkpoints" / name / POLICY_MODULE / "module_state.pkl"
        assert weights.stat().st_size > 0
        weights.write_bytes(b"")  # as an earlier memrl could leave it
        fresh = build_algorithm_config(_remote_learner_exp()).build_algo()
        with pytest.raises(RuntimeError, match=r"the learner could not load the checkpoint .*"):
            restore_checkpoint(fresh, tmp_path / "run" / "checkpoints" / name)
    finally:
        for a in (algo, fresh):
            if a is not None:
                a.stop()
        ray.shutdown()
