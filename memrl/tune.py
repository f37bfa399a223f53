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

The sweep directory (``--output``, default ``<run.output_dir>/<name>-tune``) is Tune's experiment
directory (one folder per trial, checkpoints, experiment state) plus ``sweep.yaml`` (the resolved
config), ``trials.parquet`` (one row per trial) and ``summary.md``. ``--resume`` continues an
interrupted sweep from that state: finished trials stay finished, unfinished ones continue from
their newest checkpoint, errored ones are retried.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from memrl.config import ExperimentConfig, apply_overrides, load_yaml, parse_config
from memrl.settings import from_dict

logger = logging.getLogger(__name__)

SEARCH_KINDS = ("grid", "choice", "uniform", "loguniform")
"""How a search-space key is sampled: every value (grid), one of the values (choice), or a float
drawn from [low, high] uniformly or log-uniformly."""

SWEEP_CONFIG = "sweep.yaml"
TRIALS_TABLE = "trials.parquet"
SUMMARY = "summary.md"
# Tune's own bookkeeping columns, which it adds to every result itself.
_TUNE_OWNED = ("training_iteration", "time_total_s", "time_this_iter_s")


@dataclass(frozen=True)
class SearchDimension:
    """One key of the search space: an experiment-config path and how its value is drawn."""

    key: str
    """Dotted experiment-config path, as for --set (e.g. model.l_sum)."""
    kind: str
    """One of SEARCH_KINDS."""
    values: tuple[Any, ...]
    """grid/choice: the values; uniform/loguniform: (low, high)."""

    @classmethod
    def parse(cls, key: str, spec: Any) -> SearchDimension:
        where = f"tune.search_space.{key}"
        example = (
            "{grid: [2, 4]}, {choice: [a, b]}, {uniform: [0.9, 0.99]}, {loguniform: [1e-4, 1e-2]}"
        )
        if not isinstance(spec, dict) or len(spec) != 1:
            raise ValueError(
                f"{where} must be a mapping with exactly one of {list(SEARCH_KINDS)}, got "
                f"{spec!r}. Examples: {example}"
            )
        ((kind, values),) = spec.items()
        if kind not in SEARCH_KINDS:
            raise ValueError(
                f"{where}: unknown kind {kind!r}. Allowed: {list(SEARCH_KINDS)} (e.g. {example})"
            )
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}.{kind} must be a non-empty list, got {values!r}")
        if kind in ("uniform", "loguniform"):
            if len(values) != 2 or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in values
            ):
                raise ValueError(f"{where}.{kind} must be [low, high] numbers, got {values!r}")
            low, high = float(values[0]), float(values[1])
            if not low < high:
                raise ValueError(f"{where}.{kind} needs low < high, got [{low}, {high}]")
            if kind == "loguniform" and low <= 0:
                raise ValueError(f"{where}.loguniform needs low > 0, got {low}")
            values = [low, high]
        return cls(key, kind, tuple(values))

    def example(self) -> Any:
        """A value this dimension can take (to check the key against the config early)."""
        if self.kind in ("grid", "choice"):
            return self.values[0]
        return (
            self.values[0] if self.kind == "uniform" else math.sqrt(self.values[0] * self.values[1])
        )

    def to_tune(self) -> Any:
        from ray import tune

        values = list(self.values)
        if self.kind == "grid":
            return tune.grid_search(values)
        if self.kind == "choice":
            return tune.choice(values)
        if self.kind == "uniform":
            return tune.uniform(*values)
        return tune.loguniform(*values)


@dataclass(frozen=True)
class FIFOSettings:
    """No scheduler: every trial runs to the stop criteria."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "fifo")

    def make(self, tune_settings: TuneSettings, exp: ExperimentConfig) -> Any:
        return None


@dataclass(frozen=True)
class ASHASettings:
    """Asynchronous successive halving: stops the worse trials at rungs grace_period * rf^k."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "asha")

    time_attr: str = "training_iteration"
    """What the rungs count (a result column that grows: training_iteration, env_steps_sampled)."""
    max_t: int | None = None
    """Longest a trial runs, in time_attr units (null: run.stop_iters)."""
    grace_period: int = 1
    """Least a trial runs before it can be stopped."""
    reduction_factor: float = 4.0
    """1/reduction_factor of the trials go on at each rung."""
    brackets: int = 1
    """Number of brackets (different grace periods)."""

    def validate(self, where: str) -> None:
        if self.grace_period < 1 or self.reduction_factor <= 1 or self.brackets < 1:
            raise ValueError(
                f"{where}: grace_period and brackets must be >= 1 and reduction_factor > 1, got "
                f"{self.grace_period}, {self.brackets}, {self.reduction_factor}"
            )

    def make(self, tune_settings: TuneSettings, exp: ExperimentConfig) -> Any:
        from ray.tune.schedulers import ASHAScheduler

        max_t = self.max_t or exp.run.stop_iters
        if not max_t:
            raise ValueError(
                "tune.scheduler.max_t is needed when run.stop_iters is 0 (no iteration limit)"
            )
        if max_t < self.grace_period:
            raise ValueError(
                f"tune.scheduler.max_t ({max_t}) must be >= grace_period ({self.grace_period})"
            )
        return ASHAScheduler(
            time_attr=self.time_attr,
            max_t=max_t,
            grace_period=self.grace_period,
            reduction_factor=self.reduction_factor,
            brackets=self.brackets,
        )


@dataclass(frozen=True)
class PBTSettings:
    """Population-based training: every perturbation_interval, the worst trials copy the best
    ones' checkpoints and continue with mutated hyperparameters."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "pbt")

    time_attr: str = "training_iteration"
    """What perturbation_interval counts."""
    perturbation_interval: int = 4
    """How often (in time_attr units) trials are compared and perturbed."""
    quantile_fraction: float = 0.25
    """Fraction of trials that copy from / are copied by others."""
    resample_probability: float = 0.25
    """Probability of resampling a value from its search-space range instead of scaling it."""
    mutate: list[str] | None = None
    """Search-space keys PBT changes (null: every key that is not a grid)."""

    def validate(self, where: str) -> None:
        if self.perturbation_interval < 1:
            raise ValueError(f"{where}.perturbation_interval must be >= 1")
        if not 0 < self.quantile_fraction <= 0.5:
            raise ValueError(f"{where}.quantile_fraction must be in (0, 0.5]")

    def make(self, tune_settings: TuneSettings, exp: ExperimentConfig) -> Any:
        from ray.tune.schedulers import PopulationBasedTraining

        dims = {d.key: d for d in tune_settings.dimensions()}
        keys = (
            self.mutate
            if self.mutate is not None
            else [k for k, d in dims.items() if d.kind != "grid"]
        )
        unknown = [k for k in keys if k not in dims]
        if unknown:
            raise ValueError(
                f"tune.scheduler.mutate names {unknown}, which are not in tune.search_space "
                f"({sorted(dims)})"
            )
        if not keys:
            raise ValueError(
                "tune.scheduler (pbt) has nothing to mutate: add a choice/uniform/loguniform key "
                "to tune.search_space or list keys in tune.scheduler.mutate"
            )
        mutations: dict[str, Any] = {}
        for key in keys:
            _set_path(mutations, key, dims[key].to_tune())
        return PopulationBasedTraining(
            time_attr=self.time_attr,
            perturbation_interval=self.perturbation_interval,
            quantile_fraction=self.quantile_fraction,
            resample_probability=self.resample_probability,
            hyperparam_mutations=mutations,
        )


SCHEDULERS: dict[str, type] = {"fifo": FIFOSettings, "asha": ASHASettings, "pbt": PBTSettings}
"""tune.scheduler.type -> settings class."""


@dataclass(frozen=True)
class TuneSettings:
    """The `tune:` section of an experiment config."""

    search_space: dict[str, Any]
    """Dotted config key -> {grid|choice|uniform|loguniform: ...} (see SearchDimension)."""
    metric: str = "episode_return_mean"
    """The result column trials are ranked by (any column of memrl's metrics rows)."""
    mode: Literal["max", "min"] = "max"
    """Whether a larger or a smaller metric is better."""
    num_samples: int = 1
    """Samples of the random dimensions; each is crossed with every grid point."""
    max_concurrent_trials: int = 0
    """Trials running at once (0: as many as the resources allow)."""
    scheduler: Any = None
    """{type: fifo|asha|pbt, ...} (default fifo)."""
    checkpoint_every: int | None = None
    """Checkpoint each trial every N iterations (null: run.checkpoint_every; pbt: its interval)."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept per trial."""
    max_failures: int = 0
    """Times a failed trial is restarted from its last checkpoint."""

    def validate(self, where: str) -> None:
        if not self.search_space:
            raise ValueError(f"{where}.search_space is empty: add at least one key to sweep")
        self.dimensions()
        if self.num_samples < 1 or self.max_concurrent_trials < 0 or self.keep_checkpoints < 1:
            raise ValueError(
                f"{where}: num_samples and keep_checkpoints must be >= 1 and "
                f"max_concurrent_trials >= 0, got {self.num_samples}, {self.keep_checkpoints}, "
                f"{self.max_concurrent_trials}"
            )
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ValueError(f"{where}.checkpoint_every must be null or >= 1")

    def num_trials(self) -> int:
        """Trials of the whole sweep: num_samples x every grid point."""
        return self.num_samples * math.prod(
            len(d.values) for d in self.dimensions() if d.kind == "grid"
        )

    def dimensions(self) -> list[SearchDimension]:
        return [SearchDimension.parse(k, v) for k, v in self.search_space.items()]

    def param_space(self) -> dict[str, Any]:
        """Tune's nested param space (model.l_sum -> {"model": {"l_sum": ...}})."""
        space: dict[str, Any] = {}
        for dim in self.dimensions():
            _set_path(space, dim.key, dim.to_tune())
        return space


def parse_tune_settings(data: Any) -> TuneSettings:
    """Validates the `tune:` section into TuneSettings (errors name the key)."""
    if data is None:
        raise ValueError(
            "the config has no tune: section. Add one with a search_space, e.g.\n"
            "tune:\n  metric: episode_return_mean\n  mode: max\n  search_space:\n"
            "    algorithm.lr: {loguniform: [1.0e-4, 1.0e-3]}\n"
            "(see configs/tune_memo_key_door.yaml and docs/tune.md)"
        )
    if not isinstance(data, dict):
        raise TypeError(f"tune must be a mapping, got {data!r}")
    data = dict(data)
    sched = data.pop("scheduler", None) or {"type": "fifo"}
    if not isinstance(sched, dict):
        raise TypeError(f"tune.scheduler must be a mapping with a type, got {sched!r}")
    sched = dict(sched)
    kind = sched.pop("type", "fifo")
    if kind not in SCHEDULERS:
        raise ValueError(f"Unknown tune.scheduler.type {kind!r}. Available: {sorted(SCHEDULERS)}")
    scheduler = from_dict(SCHEDULERS[kind], sched, "tune.scheduler")
    settings = from_dict(TuneSettings, data, "tune")
    return dataclasses.replace(settings, scheduler=scheduler)


def trial_experiment(base: dict[str, Any], params: dict[str, Any]) -> ExperimentConfig:
    """The experiment of one trial: the base config with the trial's sampled values applied."""
    data = apply_overrides(base, [f"{k}={json.dumps(v)}" for k, v in _flat(params)])
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
            _set_path(params, dim.key, value)
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

    from memrl.config import build_algorithm_config
    from memrl.train import build_algo, metrics_row, sync_env_runner_weights

    class MemrlTrainable(tune.Trainable):
        """One trial: an RLlib Algorithm built from memrl's config, one iteration per step."""

        def setup(self, config: dict[str, Any], base: dict[str, Any] | None = None) -> None:
            assert base is not None, "pass the base config with tune.with_parameters"
            exp = trial_experiment(base, config)
            algo_config = build_algorithm_config(exp)
            self.algo = build_algo(algo_config, Path(self.logdir) / "rllib")

        def step(self) -> dict[str, Any]:
            row = metrics_row(self.algo.train(), self.algo)
            return {k: v for k, v in row.items() if k not in _TUNE_OWNED}

        def save_checkpoint(self, checkpoint_dir: str) -> None:
            self.algo.save_to_path(str(Path(checkpoint_dir).resolve()))

        def load_checkpoint(self, checkpoint: str) -> None:
            self.algo.restore_from_path(str(Path(checkpoint).resolve()))
            sync_env_runner_weights(self.algo)

        def cleanup(self) -> None:
            self.algo.stop()

    return MemrlTrainable


def trial_resources(base: dict[str, Any], params: dict[str, Any]) -> Any:
    """The placement group a trial needs: its algorithm's driver, env runners and learners."""
    from memrl.config import build_algorithm_config

    algo_config = build_algorithm_config(trial_experiment(base, params))
    return algo_config.algo_class.default_resource_request(algo_config)


def make_trainable(base: dict[str, Any]) -> Any:
    from ray import tune

    return tune.with_resources(
        tune.with_parameters(_trainable_class(), base=base),
        lambda params: trial_resources(base, params),
    )


def sweep_dir_for(exp: ExperimentConfig, output: str | None) -> Path:
    return Path(output) if output else Path(exp.run.output_dir) / f"{exp.name}-tune"


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

    from memrl.config import check_resources, validate_env
    from memrl.ray_session import ray_session

    out = Path(sweep_dir).resolve()
    saved = out / SWEEP_CONFIG
    if resume:
        if not saved.is_file():
            raise ValueError(
                f"--resume: {out} holds no sweep ({SWEEP_CONFIG} is missing). Drop --resume to "
                "start one."
            )
        base = load_yaml(saved)
    elif saved.exists():
        raise ValueError(
            f"{out} already holds a sweep. Use --resume to continue it, or another --output."
        )
    settings = parse_tune_settings(base.get("tune"))
    check_search_space(base, settings)
    first = trial_experiment(base, _first_params(settings))
    validate_env(first)
    scheduler = settings.scheduler.make(settings, first)
    with ray_session(address) as info:
        if info.embedded:
            check_resources(first, info.cpus, info.gpus, where="this machine's Ray")
            _check_trial_fits(base, settings, info.cpus, info.gpus)
        # Written once the sweep can start, so a refused start leaves no "sweep" behind.
        out.mkdir(parents=True, exist_ok=True)
        if not resume:
            saved.write_text(yaml.safe_dump(base, sort_keys=False))
        trainable = make_trainable(base)
        if resume and tune.Tuner.can_restore(str(out)):
            echo(f"resuming the sweep in {out}")
            tuner = tune.Tuner.restore(
                str(out), trainable=trainable, resume_unfinished=True, resume_errored=True
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
                run_config=_run_config(settings, first, out),
            )
        grid = tuner.fit()
        rows, finished = trials_table(grid, settings)
    import pandas as pd

    pd.DataFrame(rows).to_parquet(out / TRIALS_TABLE, index=False)
    return rows, finished


def run_tune(args: argparse.Namespace) -> int:
    """`memrl tune CONFIG [--set ...] [--output DIR] [--resume] [--address ...]`."""
    base = apply_overrides(load_yaml(args.config), list(args.overrides))
    base.setdefault("name", Path(args.config).stem)
    exp = parse_config({k: v for k, v in base.items() if k != "tune"})
    out = sweep_dir_for(exp, args.output)
    rows, finished = run_sweep(base, out, resume=args.resume, address=args.address)
    settings = parse_tune_settings(load_yaml(out / SWEEP_CONFIG).get("tune"))
    text = summary_text(rows, settings, finished, out)
    (out / SUMMARY).write_text(f"# Sweep {exp.name}\n\n{text}\n")
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
        row.update({k: v for k, v in _flat(result.config or {})})
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
    rows: list[dict[str, Any]], settings: TuneSettings, finished: bool, out: Path
) -> str:
    from memrl.bench._report import format_table

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


def _run_config(settings: TuneSettings, exp: ExperimentConfig, out: Path) -> Any:
    from ray import tune

    stop: dict[str, int] = {}
    if exp.run.stop_iters:
        stop["training_iteration"] = exp.run.stop_iters
    if exp.run.stop_timesteps:
        stop["env_steps_sampled"] = exp.run.stop_timesteps
    if not stop:
        raise ValueError(
            "run.stop_iters and run.stop_timesteps are both 0: a sweep needs a stop criterion"
        )
    every = settings.checkpoint_every
    if every is None:
        sched = settings.scheduler
        every = (
            sched.perturbation_interval
            if isinstance(sched, PBTSettings)
            else exp.run.checkpoint_every
        )
    return tune.RunConfig(
        name=out.name,
        storage_path=str(out.parent),
        stop=stop,
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=settings.keep_checkpoints,
            checkpoint_frequency=every,
            checkpoint_at_end=True,
        ),
        failure_config=tune.FailureConfig(max_failures=settings.max_failures),
        verbose=1,
    )


def _check_trial_fits(
    base: dict[str, Any], settings: TuneSettings, cpus: float, gpus: float
) -> None:
    bundles = trial_resources(base, _first_params(settings)).bundles
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
        _set_path(params, dim.key, dim.example())
    return params


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value


def _flat(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            items += _flat(v, key + ".")
        else:
            items.append((key, v))
    return items
