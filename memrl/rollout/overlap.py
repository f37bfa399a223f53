"""``OverlappedPPO``: RLlib's PPO whose env runner samples the next batch while the learner trains.

With ``resources.overlap_sampling`` on the bulk path (num_env_runners 0: the runner and the
learner both in the driver), each training step hands the learner the batch sampled during the
previous step and, meanwhile, has a background thread sample the next one with the weights the
runner holds. The two share no state: the runner acts with its own copy of the module, and the
learner's new weights reach it after both are done, as in RLlib's PPO. So every batch is acted one
weight version behind the learner that trains on it. PPO clipped around that acting policy, which
the learner has already moved away from, would zero the gradient of many steps, so such batches
are marked (``ACTED_BEHIND``) and Memo's learner trains them with decoupled PPO (clipped around its
own policy before the update, weighted by its probability over the acting one's;
``memrl.methods.memo.bulk_learner``); overlapped sampling is for Memo models. On two cores,
acting and learning then use one each.

Both threads hand Python's GIL back and forth: every torch call releases it, and by default a
thread that wants it back waits up to Python's 5 ms switch interval while the other runs Python
code, which made the learner a third slower than at a 0.1 ms interval (Memo, 2 cores). During
the overlap the interval is 0.1 ms (``SWITCH_INTERVAL_S``; restored after), and the learner runs
7-16% below its solo speed.

Everything else is PPO's ``training_step``: the env runner's metrics for each batch (aggregated
when it is trained on), the learner update with RLlib's timesteps, and the weight sync. A batch
sampled ahead is not part of a checkpoint: after a restore the first step samples anew. An error
in either thread ends the step with that error, after the other thread is done.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from ray.rllib.algorithms.ppo import PPO
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from memrl.rollout.arrays import ACTED_BEHIND
from memrl.rollout.learner import rollouts_in

SWITCH_INTERVAL_S = 1e-4
"""Python's thread switch interval while sampling and learning overlap (see the module
docstring)."""


class _Sampling:
    """One env runner ``sample`` + ``get_metrics`` in a background thread."""

    def __init__(self, runner: Any, num_timesteps: int) -> None:
        self._result: tuple[Any, Any] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(runner, num_timesteps), name="memrl-sampling", daemon=True
        )
        self._thread.start()

    def _run(self, runner: Any, num_timesteps: int) -> None:
        try:
            self._result = sample_with_metrics(runner, num_timesteps)
        except BaseException as err:  # re-raised in the training thread by result()
            self._error = err

    def result(self) -> tuple[Any, Any]:
        """The samples and the runner's metrics (waits for the thread; raises its error)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def sample_with_metrics(runner: Any, num_timesteps: int) -> tuple[Any, Any]:
    """A runner's samples of ``num_timesteps`` env steps and the metrics of that sampling."""
    return runner.sample(num_timesteps=num_timesteps), runner.get_metrics()


class OverlappedPPO(PPO):
    """PPO that samples batch k+1 while training on batch k; see the module docstring."""

    _ahead: tuple[Any, Any] | None = None

    def training_step(self) -> None:
        runner = self.env_runner_group.local_env_runner
        if self.env_runner_group.num_remote_workers() or runner is None or runner.env is None:
            raise ValueError(
                "resources.overlap_sampling samples in the driver's env runner: it needs "
                "num_env_runners 0; with remote env runners, turn overlap_sampling off"
            )
        steps = self.config.total_train_batch_size
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            if self._ahead is None:
                samples, runner_metrics = sample_with_metrics(runner, steps)
            else:  # sampled during the last update, by the weights before it
                (samples, runner_metrics), self._ahead = self._ahead, None
                for rollout in rollouts_in(samples) or []:
                    rollout.extras[ACTED_BEHIND] = True
            self.metrics.aggregate([runner_metrics], key=ENV_RUNNER_RESULTS)
        interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        try:
            learner_results = self._update_while_sampling(runner, steps, samples)
        finally:
            sys.setswitchinterval(interval)
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            modules = set(learner_results[0].keys()) - {ALL_MODULES}
            self.env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group,
                policies=modules,
                inference_only=True,
            )

    def _update_while_sampling(self, runner: Any, steps: int, samples: Any) -> Any:
        """The learner update on ``samples`` while a thread samples the next batch (kept in
        ``_ahead``); returns the learner results."""
        sampling = _Sampling(runner, steps)
        try:
            with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
                learner_results = self.learner_group.update(
                    episodes=samples,
                    timesteps={
                        NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                            (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)
                        ),
                        NUM_MODULE_STEPS_TRAINED_LIFETIME: self.metrics.peek(
                            (LEARNER_RESULTS, ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME),
                            default=0,
                        ),
                    },
                    num_epochs=self.config.num_epochs,
                    minibatch_size=self.config.minibatch_size,
                    shuffle_batch_per_epoch=self.config.shuffle_batch_per_epoch,
                )
                self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        except BaseException:
            try:
                sampling.result()  # the runner is idle again before the error goes up
            except Exception:  # the learner's error is the one to report
                pass
            raise
        self._ahead = sampling.result()
        return learner_results

    def restore_from_path(self, *args: Any, **kwargs: Any) -> None:
        self._ahead = None  # acted by the weights being replaced
        super().restore_from_path(*args, **kwargs)

    def set_state(self, *args: Any, **kwargs: Any) -> None:
        self._ahead = None
        super().set_state(*args, **kwargs)
