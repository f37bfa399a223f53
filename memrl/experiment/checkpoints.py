"""An Algorithm built for a run, and a checkpoint restored into it with its weights on every runner.

Used by ``memrl train`` (``--resume``), ``memrl tune`` (trial restore), ``memrl eval`` (acting
only) and the benchmarks that build an Algorithm directly.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from memrl.experiment.learner_health import learners_lost
from memrl.experiment.run_dir import MODULE_COMPONENT, STATE_FILE

logger = logging.getLogger(__name__)


def build_algo(algo_config: Any, logdir: Path) -> Any:
    """Builds the Algorithm with its (unused) Trainable logdir under the run, not ~/ray_results.

    RLlib 2.60's Algorithm is still a Tune Trainable; outside Tune it makes a log directory under
    ``ray.train.constants.DEFAULT_STORAGE_PATH`` (``~/ray_results``), read from the trainable
    module's globals at construction. Pointing that global at the run keeps the home dir clean.
    """
    from ray.tune.trainable import trainable

    logdir.mkdir(parents=True, exist_ok=True)
    saved = trainable.DEFAULT_STORAGE_PATH
    trainable.DEFAULT_STORAGE_PATH = str(logdir)
    try:
        return algo_config.build_algo()
    finally:
        trainable.DEFAULT_STORAGE_PATH = saved


def restore_checkpoint(algo: Any, checkpoint: Path, *, acting_only: bool = False) -> None:
    """Restores an Algorithm from one of memrl's checkpoints and pushes the weights to every env
    runner.

    ``acting_only``: only what acting needs (the RLModule weights and the env runners' state),
    not the optimizer's. A full restore whose optimizer state does not fit the model (a
    checkpoint written by an older memrl, whose layers were laid out differently) falls back to
    that, with a warning: training goes on from the saved weights with fresh optimizer moments.
    """
    try:
        _restore(algo, checkpoint, acting_only)
    except Exception as err:
        # RLlib's restore only marks a remote learner whose load failed unhealthy; the next call
        # then fails on the empty learner list, far from the cause (which RLlib logs above).
        if not learners_lost(algo):
            raise
        raise RuntimeError(
            f"the learner could not load the checkpoint {checkpoint} (its error is logged above), "
            "or was lost while loading it; a damaged checkpoint can be moved aside to resume "
            "from the one before"
        ) from err
    if learners_lost(algo):
        raise RuntimeError(f"a learner was lost while it loaded the checkpoint {checkpoint}")


def _restore(algo: Any, checkpoint: Path, acting_only: bool) -> None:
    path = Path(checkpoint).resolve()
    if not acting_only:
        try:
            algo.restore_from_path(str(path))
            sync_env_runner_weights(algo)
            return
        except ValueError as err:
            if "parameter group" not in str(err):
                raise
            logger.warning(
                "%s: the optimizer state does not fit this model (%s); restoring the weights "
                "only, with fresh optimizer state",
                checkpoint,
                err,
            )
    algo.restore_from_path(str(path / MODULE_COMPONENT), component=MODULE_COMPONENT)
    if (path / "env_runner").is_dir() and algo.env_runner is not None:
        algo.env_runner.restore_from_path(str(path / "env_runner"))
    if not acting_only:  # the Algorithm's own counters: iteration, lifetime metrics
        import pickle

        with open(path / STATE_FILE, "rb") as f:
            algo.set_state(pickle.load(f))
    sync_env_runner_weights(algo)


def sync_env_runner_weights(algo: Any) -> None:
    """Pushes the learner's weights to every env runner (a restore may leave them stale)."""
    if algo.env_runner_group is None:
        return
    algo.env_runner_group.sync_weights(
        from_worker_or_learner_group=algo.learner_group, inference_only=True
    )
