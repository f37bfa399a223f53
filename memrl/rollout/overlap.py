"""``OverlappedPPO``: RLlib's PPO whose env runners sample the next batch while the learner trains.

With ``resources.overlap_sampling`` on the bulk path, each training step hands the learner the
batch sampled during the previous step and, meanwhile, has the env runners sample the next one with
the weights they hold: remote runners get their sample request before the update (each actor runs
its calls in order, so the weight sync that follows the update reaches a runner after that sample;
the sync first waits for the runner's previous weights, which RLlib would otherwise drop the new
ones for); with num_env_runners 0, a background thread of the driver samples with the driver's
runner. Runner and learner share no state: the runner acts with its own copy of the module, and the
learner's new weights reach it after both are done, as in RLlib's PPO. So every batch is acted one
weight version behind the learner that trains on it. PPO clipped around that acting policy, which
the learner has already moved away from, would zero the gradient of many steps, so such batches are
marked (``ACTED_BEHIND``) and Memo's learner trains them with decoupled PPO (clipped around its own
policy before the update, weighted by its probability over the acting one's;
``memrl.methods.memo.bulk_learner``); overlapped sampling is for Memo models. On two cores, acting
and learning then use one each.

A remote runner samples in its own process. A thread of the driver shares Python's GIL with the
learner: every torch call releases it, and by default a thread that wants it back waits up to
Python's 5 ms switch interval while the other runs Python code, which made the learner a third
slower than at a 0.1 ms interval (Memo, 2 cores). During the overlap the interval is 0.1 ms
(``SWITCH_INTERVAL_S``; restored after); the learner still runs 10-30% below its solo speed,
against 0-13% beside a remote runner (``memrl bench scaling``, docs/clusters.md).

Everything else is PPO's ``training_step``: the env runners' metrics for each batch (aggregated
when it is trained on), the learner update with RLlib's timesteps, and the weight sync. A batch
sampled ahead is not part of a checkpoint: after a restore the first step samples anew. An error
in the learner or in the sampling thread ends the step with that error, after the other is done.
A remote runner lost while sampling ahead is handled as RLlib handles one lost in a synchronous
sample (with ``fault_tolerance.restart_failed_env_runners`` the step samples anew from the
runners left and RLlib brings the lost one back; otherwise its error ends the step).
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

from ray.rllib.algorithms.ppo import PPO
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
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

AHEAD_TAG = "memrl-sample-ahead"
"""Tag of the remote runners' sample requests made during an update."""

WEIGHTS_TAG = "set_state"
"""Tag of RLlib's weight sync requests (``EnvRunnerGroup.sync_weights``)."""

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
    """Local runner: the batch sampled during the last update and its metrics."""
    _remote_ahead = 0
    """Remote runners: the sample requests in flight (tag ``AHEAD_TAG``)."""

    def training_step(self) -> None:
        group = self.env_runner_group
        remote = group.num_remote_workers() > 0
        runner = group.local_env_runner
        if not remote and (runner is None or runner.env is None):
            raise ValueError(
                "resources.overlap_sampling needs an env runner with an env: the driver's "
                "(num_env_runners 0) or remote ones"
            )
        steps = self.config.total_train_batch_size
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            ahead = self._take_remote_ahead() if remote else self._take_local_ahead()
            if ahead is not None:  # sampled during the last update, by the weights before it
                samples, runner_metrics = ahead
                for rollout in rollouts_in(samples) or []:
                    rollout.extras[ACTED_BEHIND] = True
            elif remote:
                samples, runner_metrics = synchronous_parallel_sample(
                    worker_set=group,
                    max_env_steps=steps,
                    sample_timeout_s=self.config.sample_timeout_s,
                    _uses_new_env_runners=True,
                    _return_metrics=True,
                )
                if not samples:  # every runner failed: RLlib restores them after the step
                    return
            else:
                samples, metrics = sample_with_metrics(runner, steps)
                runner_metrics = [metrics]
            self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
        if remote:
            # Each runner's next sample is queued before the new weights (its actor runs
            # calls in order): it acts with the weights before this update.
            per_runner = -(-steps // max(1, group.num_healthy_remote_workers()))
            self._remote_ahead = group.foreach_env_runner_async(
                functools.partial(sample_with_metrics, num_timesteps=per_runner), tag=AHEAD_TAG
            )
            learner_results = self._update(samples)
        else:
            interval = sys.getswitchinterval()
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            try:
                learner_results = self._update_while_sampling(runner, steps, samples)
            finally:
                sys.setswitchinterval(interval)
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            modules = set(learner_results[0].keys()) - {ALL_MODULES}
            if remote:
                # RLlib drops a runner's new weights while its last ones are still in flight
                # (one request per tag): the runner would sample the next batch two versions
                # behind. The last ones come before the sample in flight, so waiting for them
                # is short.
                group.fetch_ready_async_reqs(
                    tags=WEIGHTS_TAG, timeout_seconds=self.config.sample_timeout_s
                )
            group.sync_weights(
                from_worker_or_learner_group=self.learner_group,
                policies=modules,
                inference_only=True,
            )

    def _take_local_ahead(self) -> tuple[Any, list[Any]] | None:
        if self._ahead is None:
            return None
        (samples, metrics), self._ahead = self._ahead, None
        return samples, [metrics]

    def _take_remote_ahead(self) -> tuple[list[Any], list[Any]] | None:
        """The remote runners' batch sampled during the last update (waits for it); None when
        none was asked for or a runner failed on it (its error is raised unless the config
        ignores env runner failures; the step then samples anew)."""
        if not self._remote_ahead:
            return None
        asked, self._remote_ahead = self._remote_ahead, 0
        done = self.env_runner_group.fetch_ready_async_reqs(
            tags=AHEAD_TAG, timeout_seconds=self.config.sample_timeout_s
        )
        if len(done) < asked:
            return None
        return [samples for _, (samples, _) in done], [metrics for _, (_, metrics) in done]

    def _drop_ahead(self) -> None:
        """Forgets the batch sampled ahead (acted by weights that are being replaced)."""
        self._ahead = None
        if self._remote_ahead:
            self._remote_ahead = 0
            try:
                self.env_runner_group.fetch_ready_async_reqs(tags=AHEAD_TAG, timeout_seconds=None)
            except Exception:  # a failed runner's sample is dropped all the same
                pass

    def _update(self, samples: Any) -> Any:
        """The learner update on ``samples`` with RLlib's timesteps; returns its results."""
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
        return learner_results

    def _update_while_sampling(self, runner: Any, steps: int, samples: Any) -> Any:
        """The learner update on ``samples`` while a thread samples the next batch (kept in
        ``_ahead``); returns the learner results."""
        sampling = _Sampling(runner, steps)
        try:
            learner_results = self._update(samples)
        except BaseException:
            try:
                sampling.result()  # the runner is idle again before the error goes up
            except Exception:  # the learner's error is the one to report
                pass
            raise
        self._ahead = sampling.result()
        return learner_results

    def restore_from_path(self, *args: Any, **kwargs: Any) -> None:
        self._drop_ahead()  # acted by the weights being replaced
        super().restore_from_path(*args, **kwargs)

    def set_state(self, *args: Any, **kwargs: Any) -> None:
        self._drop_ahead()
        super().set_state(*args, **kwargs)
