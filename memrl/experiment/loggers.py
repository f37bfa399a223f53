"""Where a run's metrics go besides metrics.parquet: TensorBoard, Weights & Biases, MLflow.

``run.loggers`` in the config picks them (default ``[tensorboard]``):

- ``tensorboard``: event files in ``<run>/tb`` (``tensorboard --logdir runs``), tags grouped as
  ``env/`` (returns, lengths, inner episodes, runner health), ``learner/`` (losses, KL, entropy),
  ``memory/`` (peak tokens, context tokens, dependency, KV bytes), ``eval/`` (held-out scores)
  and ``time/``;
- ``wandb`` and ``mlflow``: Ray's own logger callbacks (``WandbLoggerCallback``,
  ``MLflowLoggerCallback``), the ones ``memrl tune`` trials would use, driven here with the run
  as their single trial. They read the usual environment variables: ``WANDB_MODE=offline``,
  ``WANDB_PROJECT`` (else project ``memrl``), ``MLFLOW_TRACKING_URI`` (else an MLflow file store
  in ``<run>/mlruns``), ``MLFLOW_EXPERIMENT_NAME`` (else ``memrl``). The W&B run's files go under
  ``<run>/wandb``.

Every logger receives the same flat row that metrics.parquet stores, with the grouped names.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

from memrl.extras import require

logger = logging.getLogger(__name__)

LOGGERS = ("tensorboard", "wandb", "mlflow")
"""The names ``run.loggers`` accepts."""

_MEMORY_WORDS = ("peak_tokens", "context_tokens", "dependency", "kv_bytes", "generated_tokens")
_ENV_PREFIXES = ("episode_", "inner_", "num_episodes", "env_", "healthy_env_runners")


def metric_tag(key: str) -> str:
    """The grouped name of a metrics.parquet column: ``learner_total_loss`` ->
    ``learner/total_loss``, ``inner_return_0`` -> ``env/inner_return_0``,
    ``learner_rollout_peak_tokens`` -> ``memory/rollout_peak_tokens``, ``learner_eval_em`` ->
    ``eval/em``, ``time_total_s`` -> ``time/total_s``."""
    name = key[len("learner_") :] if key.startswith("learner_") else key
    if name.startswith("memory_"):
        return "memory/" + name[len("memory_") :]
    if name.startswith("eval_"):
        return "eval/" + name[len("eval_") :]
    if any(word in name for word in _MEMORY_WORDS):
        return "memory/" + name
    if key.startswith("learner_"):
        return "learner/" + name
    if key.startswith("time_"):
        return "time/" + key[len("time_") :]
    if key.startswith(_ENV_PREFIXES):
        return "env/" + key
    return "misc/" + key


def loggable(row: dict[str, Any]) -> dict[str, float]:
    """The row's finite numbers under their grouped names (iteration and steps are the x axes)."""
    out = {}
    for key, value in row.items():
        if key in ("training_iteration",) or isinstance(value, bool):
            continue
        if isinstance(value, int | float) and math.isfinite(value):
            out[metric_tag(key)] = float(value)
    return out


class _RunAsTrial:
    """The run seen as the one trial of Ray's Tune logger callbacks (what they read of a Trial:
    its id, name, config, directory and experiment name)."""

    def __init__(self, name: str, config: dict[str, Any], path: Path) -> None:
        self.trial_id = name
        self.config = config
        self.local_path = str(path.resolve())  # W&B's logging actor runs in this directory
        self.experiment_dir_name = name
        self.checkpoint = None

    def __str__(self) -> str:
        return self.trial_id


class RunLoggers:
    """The loggers of one run: ``log(row)`` after every iteration, ``close()`` at the end."""

    def __init__(
        self,
        names: list[str] | tuple[str, ...],
        run_path: Path,
        run_name: str,
        config: dict[str, Any],
        first_iteration: int = 0,
    ) -> None:
        unknown = sorted(set(names) - set(LOGGERS))
        if unknown:
            raise ValueError(f"run.loggers has unknown logger(s) {unknown}; allowed: {LOGGERS}")
        self._writer: Any = None
        self._trial = _RunAsTrial(run_name, _flat_params(config), run_path)
        if "tensorboard" in names:
            from tensorboardX import SummaryWriter

            # purge_step drops events of iterations a resumed run redoes.
            self._writer = SummaryWriter(str(run_path / "tb"), purge_step=first_iteration + 1)
        self._callbacks: list[Any] = ray_logger_callbacks(names, run_path, run_name)
        for callback in self._callbacks:
            callback.setup()
            callback.log_trial_start(self._trial)

    def log(self, row: dict[str, Any]) -> None:
        """Sends one metrics row (one training iteration) to every logger."""
        iteration = int(row["training_iteration"])
        values = loggable(row)
        if self._writer is not None:
            for tag, value in values.items():
                self._writer.add_scalar(tag, value, iteration)
            self._writer.flush()
        if self._callbacks:
            # Ray's callbacks step MLflow by timesteps_total when present, else the iteration.
            result: dict[str, Any] = {**values, "training_iteration": iteration}
            if row.get("env_steps_sampled"):
                result["timesteps_total"] = int(row["env_steps_sampled"])
            for callback in self._callbacks:
                callback.log_trial_result(iteration, self._trial, result)

    def close(self, failed: bool = False) -> None:
        """Flushes and closes every logger (W&B: waits for its logging actor to finish)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for callback in self._callbacks:
            try:
                callback.log_trial_end(self._trial, failed=failed)
                callback.on_experiment_end(trials=[self._trial])
            except Exception:  # noqa: BLE001  (a logger must not lose the run's own outputs)
                logger.exception("closing logger %s failed", type(callback).__name__)
        self._callbacks = []


def ray_logger_callbacks(names: Any, path: Path, name: str) -> list[Any]:
    """Ray's W&B and MLflow logger callbacks for the names in ``run.loggers`` (TensorBoard is
    not one of them: memrl train writes it itself, and Tune writes its own)."""
    callbacks: list[Any] = []
    if "wandb" in names:
        require("wandb", "run.loggers: wandb")
        from ray.air.integrations.wandb import WandbLoggerCallback

        callbacks.append(
            WandbLoggerCallback(
                project=os.environ.get("WANDB_PROJECT", "memrl"),
                group=name,
                dir=str(path.resolve()),
                log_config=False,
            )
        )
    if "mlflow" in names:
        require("mlflow", "run.loggers: mlflow")
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (path / "mlruns").resolve().as_uri()
            # MLflow 3 refuses its file store unless asked for: a local run keeps it on purpose
            # (no database to set up; `mlflow ui --backend-store-uri <run>/mlruns` reads it).
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        callbacks.append(
            MLflowLoggerCallback(
                tracking_uri=uri,
                experiment_name=os.environ.get("MLFLOW_EXPERIMENT_NAME", "memrl"),
                tags={"memrl_run": name},
            )
        )
    return callbacks


def _flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config as flat ``section.key`` parameters (what MLflow and W&B show as params)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat_params(value, name + "."))
        else:
            out[name] = value if isinstance(value, int | float | str | bool) else str(value)
    return out
