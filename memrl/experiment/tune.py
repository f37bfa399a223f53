"""`memrl tune`: Ray Tune sweeps of an experiment config, from the search space in its `tune:` key.

```yaml
tune:
  metric: episode_return_mean       # a column of memrl's metrics.parquet rows
  mode: max
  num_samples: 2                    # samples of the random dimensions (x every grid point)
  max_concurrent_trials: 2          # 0: as many as the cluster's resources allow
  search_space:                     # dotted experiment-config keys -> one of four kinds
    model.l_sum: {grid: [2, 4]}
    algorithm.lr: {loguniform: [1.0e-4, 1.0e-3]}
    algorithm.entropy_coeff: {choice: [0.0, 0.01]}
    algorithm.gamma: {uniform: [0.95, 0.995]}
  scheduler: {type: asha, grace_period: 2}   # or {type: pbt, perturbation_interval: 4}, fifo
```

Each trial is the experiment with the sampled values applied (exactly like ``--set``), trained by
``MemrlTrainable``: a Tune Trainable that builds the RLlib algorithm from the algorithm *class* of
memrl's AlgorithmConfig (never by registered name: ``Tuner("PPO")`` makes RLlib import every
algorithm, DreamerV3 among them, which fails without PIL) and reports memrl's metrics row each
iteration. Each trial reserves its algorithm's own placement group (driver, env runners, learners),
so env runners and learners of a trial land where its ``resources:`` section says.

The sweep directory (``--output``, default ``<run.storage or run.output_dir>/<name>-tune``) is
Tune's experiment directory (one folder per trial, checkpoints, experiment state) plus
``sweep.yaml`` (the resolved config), ``trials.parquet`` (one row per trial) and ``summary.md``.
On a cluster it must be storage every node reaches (a shared directory, or a URI such as
``s3://bucket/sweeps/x``): trials on worker nodes write their checkpoints there. A trial whose
node dies is restarted from its newest checkpoint up to ``tune.max_failures`` times
(``FailureConfig``). ``--resume`` continues an interrupted sweep from that state: finished trials
stay finished, unfinished ones continue from their newest checkpoint, errored ones are retried.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import yaml

from memrl.experiment.config import (
    ExperimentConfig,
    apply_overrides,
    load_yaml,
    parse_config,
    parse_yaml,
)
from memrl.experiment.run_dir import RLLIB_LOGDIR, RunDir, is_uri, local_dir
from memrl.experiment.tune_space import (
    PBTSettings,
    TuneSettings,
    flat_items,
    parse_tune_settings,
    set_path,
)

logger = logging.getLogger(__name__)

SWEEP_CONFIG = "sweep.yaml"
TRIALS_TABLE = "trials.parquet"
SUMMARY = "summary.md"
# Tune's own bookkeeping columns, which it adds to every result itself.
_TUNE_OWNED = ("training_iteration", "time_total_s", "time_this_iter_s")


def trial_experiment(base: dict[str, Any], params: dict[str, Any]) -> ExperimentConfig:
    """The experiment of one trial: the base config with the trial's sampled values applied."""
    data = apply_overrides(base, [f"{k}={json.dumps(v)}" for k, v in flat_items(params)])
    data.pop("tune", None)
    return parse_config(data)


def check_search_space(base: dict[str, Any], settings: TuneSettings) -> None:
    """Fails early, naming the key, when a search-space key or value does not fit the config."""
    for dim in settings.dimensions():
        if dim.key.split(".")[0] in ("tune", "name"):
            raise ValueError(f"tune.search_space cannot sweep {dim.key!r} (tune.* and name)")
        values = dim.values if dim.kind in ("grid", "choice") else (dim.example(),)
        for value in values:
            params: dict[str, Any] = {}
            set_path(params, dim.key, value)
            try:
                trial_experiment(base, params)
            except (ValueError, TypeError) as err:
                raise ValueError(
                    f"tune.search_space.{dim.key} = {value!r} does not fit the experiment "
                    f"config: {err}"
                ) from err


def _trainable_class() -> type:
    """The Tune Trainable of memrl trials (built on first use: Ray is imported lazily)."""
    from ray import tune

    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.checkpoints import build_algo, restore_checkpoint
    from memrl.experiment.learner_health import raise_if_learners_lost
    from memrl.experiment.progress import metrics_row

    class MemrlTrainable(tune.Trainable):
        """One trial: an RLlib Algorithm built from memrl's config, one iteration per step."""

        def setup(
            self, config: dict[str, Any], base: dict[str, Any] | None = None, sweep_dir: str = ""
        ) -> None:
            assert base is not None, "pass the base config with tune.with_parameters"
            exp = trial_experiment(base, config).located(sweep_dir)
            algo_config = build_algorithm_config(exp)
            self.algo = build_algo(algo_config, Path(self.logdir) / RLLIB_LOGDIR)

        def step(self) -> dict[str, Any]:
            row = metrics_row(self.algo.train(), self.algo)
            return {k: v for k, v in row.items() if k not in _TUNE_OWNED}

        def save_checkpoint(self, checkpoint_dir: str) -> None:
            self.algo.save_to_path(str(Path(checkpoint_dir).resolve()))
            # RLlib's save returns normally when a learner dies mid-write: fail the trial
            # instead of registering the damaged checkpoint (Tune retries from the one before).
            raise_if_learners_lost(self.algo, "while the trial was checkpointed")

        def load_checkpoint(self, checkpoint: str) -> None:
            restore_checkpoint(self.algo, Path(checkpoint))

        def cleanup(self) -> None:
            self.algo.stop()

    return MemrlTrainable


def trial_resources(base: dict[str, Any], params: dict[str, Any], sweep_dir: str) -> Any:
    """The placement group a trial needs: its algorithm's driver, env runners and learners.

    Files a method keeps with a run (a tiny model) go to the sweep directory, shared by trials.
    """
    from memrl.experiment.build import build_algorithm_config

    algo_config = build_algorithm_config(trial_experiment(base, params).located(sweep_dir))
    return algo_config.algo_class.default_resource_request(algo_config)


def make_trainable(base: dict[str, Any], sweep_dir: str | os.PathLike[str]) -> Any:
    from ray import tune

    where = str(sweep_dir)
    return tune.with_resources(
        tune.with_parameters(_trainable_class(), base=base, sweep_dir=where),
        lambda params: trial_resources(base, params, where),
    )


def sweep_dir_for(exp: ExperimentConfig, output: str | None) -> str:
    """``--output``, else ``<run.storage or run.output_dir>/<name>-tune``."""
    if output:
        return _absolute(output)
    return f"{_absolute(exp.run.storage or exp.run.output_dir).rstrip('/')}/{exp.name}-tune"


def _absolute(location: str | os.PathLike[str]) -> str:
    return str(location) if is_uri(location) else Path(location).resolve().as_posix()


def sweep_files(exp: ExperimentConfig, location: str) -> RunDir:
    """The sweep's own files (sweep.yaml, trials.parquet, summary.md) at ``location``."""
    return RunDir(location, local_dir(exp, location))


def run_sweep(
    base: dict[str, Any],
    sweep_dir: str | os.PathLike[str],
    *,
    resume: bool = False,
    address: str | None = None,
    echo: Any = print,
) -> tuple[list[dict[str, Any]], bool]:
    """Runs (or resumes) the sweep of ``base`` (a config dict with a tune section).

    Returns:
        The trials table (one row per trial) and whether every trial finished.

    Raises:
        ValueError: a bad tune section, an existing sweep without --resume, --resume with nothing
            to resume, or trials that cannot fit the resources of this machine.
    """
    from ray import tune

    from memrl.experiment.build import check_resources, validate_env
    from memrl.experiment.ray_session import ray_session

    base_exp = parse_config({k: v for k, v in base.items() if k != "tune"})
    location = _absolute(sweep_dir)
    files = sweep_files(base_exp, location)
    if resume:
        if not files.exists(SWEEP_CONFIG):
            raise ValueError(
                f"--resume: {location} holds no sweep ({SWEEP_CONFIG} is missing). Drop --resume "
                "to start one."
            )
        base = parse_yaml(files.read_text(SWEEP_CONFIG))
    elif files.exists(SWEEP_CONFIG):
        raise ValueError(
            f"{location} already holds a sweep. Use --resume to continue it, or another --output."
        )
    settings = parse_tune_settings(base.get("tune"))
    check_search_space(base, settings)
    first = trial_experiment(base, _first_params(settings))
    validate_env(first)
    scheduler = settings.scheduler.make(settings, first)
    # Files a method keeps with a run (a tiny model) go to a local directory shared by trials.
    local = str(files.path.resolve())
    with ray_session(address) as info:
        if info.embedded:
            check_resources(first, info.cpus, info.gpus, where="this machine's Ray")
            _check_trial_fits(base, settings, info.cpus, info.gpus, local)
        # Written once the sweep can start, so a refused start leaves no "sweep" behind.
        if not resume:
            files.write_text(SWEEP_CONFIG, yaml.safe_dump(base, sort_keys=False))
        trainable = make_trainable(base, local)
        if resume and tune.Tuner.can_restore(location):
            echo(f"resuming the sweep in {location}")
            tuner = tune.Tuner.restore(
                location, trainable=trainable, resume_unfinished=True, resume_errored=True
            )
        else:
            tuner = tune.Tuner(
                trainable,
                param_space=settings.param_space(),
                tune_config=tune.TuneConfig(
                    metric=settings.metric,
                    mode=settings.mode,
                    num_samples=settings.num_samples,
                    max_concurrent_trials=settings.max_concurrent_trials or None,
                    scheduler=scheduler,
                ),
                run_config=_run_config(settings, first, location),
            )
        grid = tuner.fit()
        rows, finished = trials_table(grid, settings)
    files.write_rows(TRIALS_TABLE, rows)
    return rows, finished


def run_tune(args: argparse.Namespace) -> int:
    """`memrl tune CONFIG [--set ...] [--output DIR] [--resume] [--address ...]`."""
    base = apply_overrides(load_yaml(args.config), list(args.overrides))
    base.setdefault("name", Path(args.config).stem)
    exp = parse_config({k: v for k, v in base.items() if k != "tune"})
    out = sweep_dir_for(exp, args.output)
    rows, finished = run_sweep(base, out, resume=args.resume, address=args.address)
    files = sweep_files(exp, out)
    settings = parse_tune_settings(parse_yaml(files.read_text(SWEEP_CONFIG)).get("tune"))
    text = summary_text(rows, settings, finished, out)
    files.write_text(SUMMARY, f"# Sweep {exp.name}\n\n{text}\n")
    print("\n" + text)
    print(
        f"\nsweep directory: {out}\n  {TRIALS_TABLE}, {SUMMARY}, {SWEEP_CONFIG}, one dir per trial"
    )
    return 0 if finished else 130


def trials_table(grid: Any, settings: TuneSettings) -> tuple[list[dict[str, Any]], bool]:
    """One row per trial: its sampled values, status, last and best metric, progress."""
    # ResultGrid has no public trial status (ray 2.60); its ExperimentAnalysis holds the Trials.
    statuses = {t.trial_id: t.status for t in grid._experiment_analysis.trials}
    rows = []
    for result in grid:
        metrics = result.metrics or {}
        trial_id = metrics.get("trial_id") or Path(result.path).name
        status = statuses.get(trial_id, "UNKNOWN")
        # An interrupted sweep marks its running trials TERMINATED too; only a trial that met a
        # stop criterion or was stopped by the scheduler has done=True in its last result.
        if result.error is not None:
            status = "ERROR"
        elif status == "TERMINATED" and not metrics.get("done"):
            status = "UNFINISHED"
        history = result.metrics_dataframe
        best = math.nan
        if history is not None and settings.metric in history:
            series = history[settings.metric].dropna()
            if len(series):
                best = float(series.max() if settings.mode == "max" else series.min())
        row: dict[str, Any] = {"trial_id": trial_id, "status": status}
        row.update({k: v for k, v in flat_items(result.config or {})})
        row.update(
            {
                f"{settings.metric}_last": float(metrics.get(settings.metric, math.nan)),
                f"{settings.metric}_best": best,
                "iterations": int(metrics.get("training_iteration", 0)),
                # Fewer than `iterations` when the trial continued from a checkpoint (--resume).
                "iterations_since_restore": int(metrics.get("iterations_since_restore", 0)),
                "env_steps_sampled": int(metrics.get("env_steps_sampled", 0)),
                "time_total_s": float(metrics.get("time_total_s", 0.0)),
                "checkpoint": str(result.checkpoint.path) if result.checkpoint else "",
                "error": "" if result.error is None else f"{type(result.error).__name__}",
                "path": str(result.path),
            }
        )
        rows.append(row)
    finished = len(rows) >= settings.num_trials() and all(
        r["status"] in ("TERMINATED", "ERROR") for r in rows
    )
    return rows, finished


def summary_text(
    rows: list[dict[str, Any]], settings: TuneSettings, finished: bool, out: str
) -> str:
    from memrl.experiment.tables import format_table

    last, best_col = f"{settings.metric}_last", f"{settings.metric}_best"
    sign = 1 if settings.mode == "max" else -1
    ranked = sorted(
        rows,
        key=lambda r: -math.inf if math.isnan(r[last]) else sign * r[last],
        reverse=True,
    )
    params = [d.key for d in settings.dimensions()]
    columns = ["trial_id", "status", *params, last, best_col, "iterations", "env_steps_sampled"]
    lines = [format_table(ranked, columns)]
    done = [r for r in ranked if not math.isnan(r[last])]
    if done:
        top = done[0]
        chosen = ", ".join(f"{k}={top[k]!r}" for k in params)
        lines.append(
            f"\nbest trial: {top['trial_id']} ({settings.metric} {settings.mode} = "
            f"{top[last]:.4g}): {chosen}"
        )
    if not finished:
        lines.append(
            f"\nthe sweep did not finish; continue it with: memrl tune CONFIG --output {out} "
            "--resume"
        )
    return "\n".join(lines)


def _run_config(settings: TuneSettings, exp: ExperimentConfig, out: str) -> Any:
    from ray import tune

    from memrl.experiment.loggers import ray_logger_callbacks

    stop: dict[str, int] = {}
    if exp.run.stop_iters:
        stop["training_iteration"] = exp.run.stop_iters
    if exp.run.stop_timesteps:
        stop["env_steps_sampled"] = exp.run.stop_timesteps
    if exp.run.stop_seconds:
        stop["time_total_s"] = exp.run.stop_seconds
    if not stop:
        raise ValueError(
            "run.stop_iters, run.stop_timesteps and run.stop_seconds are all 0: a sweep needs a "
            "stop criterion"
        )
    every = settings.checkpoint_every
    if every is None:
        sched = settings.scheduler
        every = (
            sched.perturbation_interval
            if isinstance(sched, PBTSettings)
            else exp.run.checkpoint_every
        )
    name = out.rsplit("/", 1)[1]
    # W&B and MLflow write their files locally: beside the sweep, or for a sweep on a URI under
    # run.output_dir (as a run on a URI keeps its local files).
    local = Path(exp.run.output_dir) / name if is_uri(out) else Path(out)
    return tune.RunConfig(
        name=name,
        storage_path=out.rsplit("/", 1)[0],
        stop=stop,
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=settings.keep_checkpoints,
            checkpoint_frequency=every,
            checkpoint_at_end=True,
        ),
        failure_config=tune.FailureConfig(max_failures=settings.max_failures),
        callbacks=ray_logger_callbacks(exp.run.loggers, local, name),
        verbose=1,
    )


def _check_trial_fits(
    base: dict[str, Any], settings: TuneSettings, cpus: float, gpus: float, local: str
) -> None:
    bundles = trial_resources(base, _first_params(settings), local).bundles
    need_cpu = sum(b.get("CPU", 0.0) for b in bundles)
    need_gpu = sum(b.get("GPU", 0.0) for b in bundles)
    if need_cpu > cpus + 1e-9 or need_gpu > gpus + 1e-9:
        raise ValueError(
            f"one trial needs {need_cpu:g} CPUs and {need_gpu:g} GPUs (driver + env runners + "
            f"learners: {bundles}) but this machine's Ray has {cpus:g} CPUs and {gpus:g} GPUs. "
            "Lower resources.num_env_runners / num_learners, or join a cluster with --address."
        )


def _first_params(settings: TuneSettings) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for dim in settings.dimensions():
        set_path(params, dim.key, dim.example())
    return params
