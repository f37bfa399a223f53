"""How a run ends early and still leaves something to resume: SIGTERM and lost learners.

``StopOnSigterm`` turns ``ray job stop``, a scheduler's preemption or ``kill`` into a stop after
the iteration in progress (with its checkpoint); ``lost_learner_ends_run`` turns the loss of a
remote learner into ``RunInterrupted`` with the command that resumes the run.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from memrl.experiment.learner_health import learner_health, learners_lost
from memrl.experiment.run_dir import CHECKPOINTS, RunDir


class RunInterrupted(RuntimeError):
    """Training cannot go on (an actor it cannot do without was lost); ``--resume`` continues."""


@contextlib.contextmanager
def lost_learner_ends_run(algo: Any, run: RunDir, last_saved: int) -> Iterator[None]:
    """Turns a lost learner, met inside the block, into RunInterrupted with how to resume.

    A learner's death shows in one of two ways, depending on which call meets it first: the
    call raises RayActorError, or an earlier call marked the learner unhealthy and RLlib skips
    it, returning no results (PPO's update then fails on the empty list with an IndexError).
    Any error while a remote learner is marked unhealthy therefore counts as the loss.
    """
    from ray.exceptions import RayActorError

    try:
        yield
    except Exception as err:
        if not (isinstance(err, RayActorError) or learners_lost(algo)):
            raise
        raise RunInterrupted(_lost_actor_message(err, algo, run, last_saved)) from err


class StopOnSigterm:
    """While active (a ``with`` block in the main thread), SIGTERM asks training to stop after
    the iteration in progress instead of ending the process at once: ``ray job stop``, a
    scheduler's preemption or ``kill`` then leave a checkpoint of the last iteration, the metrics
    and the summary, as a normal end does. A second SIGTERM goes to the handler that was there
    before (Ray's driver raises SystemExit), for a process that must end now."""

    def __init__(self, echo: Any = print) -> None:
        self._echo = echo
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> StopOnSigterm:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.requested:
            self.requested = True
            self._echo("SIGTERM: stopping after this iteration (send it again to stop at once)")
            return
        previous = self._previous
        if callable(previous):
            previous(signum, frame)
        raise SystemExit(128 + signum)


def _lost_actor_message(err: Exception, algo: Any, run: RunDir, last_saved: int) -> str:
    """What a user needs when training stops because an actor died with its node."""
    cause = (str(err).strip().splitlines() or [""])[0]
    cause = cause if len(cause) <= 160 else cause[:157] + "..."
    cause = f"{type(err).__name__}: {cause}"
    health = learner_health(algo)
    if health is not None and health[0] < health[1]:
        cause = f"{health[0]} of {health[1]} learners alive; {cause}"
    resume = (
        f"checkpoints up to iteration {last_saved} are in {run.uri(CHECKPOINTS)}; continue "
        f"with: memrl train CONFIG --output {run.location} --resume"
        if last_saved
        else "no checkpoint was written yet; start the run again"
    )
    return (
        f"training stopped in iteration {algo.iteration + 1}: an actor it cannot do without "
        f"(a learner) was lost, as when its node dies ({cause}). "
        f"{resume}, once the cluster offers the learners' resources again."
    )
