"""`memrl train`: one experiment, from config to checkpoints, metrics and a learning curve.

A run directory (``<run.output_dir>/<name>`` or ``--output``) holds:

- ``config.yaml``: the fully resolved experiment config (what ``--resume`` reads back);
- ``metrics.parquet``: one row per iteration (rewritten atomically after each one);
- ``checkpoints/iter_NNNNNN/``: RLlib checkpoints, written to a temp dir and renamed, so a kill
  during a save never leaves a half checkpoint that looks complete;
- ``tb/``: TensorBoard event files (and ``wandb/`` or ``mlruns/`` with those loggers in
  ``run.loggers``, see loggers.py); ``curve.png``: the learning curves; ``summary.md``;
- ``report.html``: the run report (run_report.py), rewritten by ``memrl eval``.

``--resume`` continues from the newest checkpoint: the iteration counter goes on, rows of
iterations after that checkpoint (whose effects were lost with the kill) are dropped and redone, and
the restored weights are pushed to every env runner explicitly.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from memrl.experiment.build import build_algorithm_config, check_resources, validate_env
from memrl.experiment.config import ExperimentConfig, parse_config
from memrl.experiment.ray_session import ray_session
from memrl.experiment.replay import REPLAY_ENVS
from memrl.experiment.run_plots import plot_training_png
from memrl.experiment.run_report import write_run_report

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "iter_"


class RunDir:
    """The files of one run, and the rules for writing them safely."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.config = self.path / "config.yaml"
        self.metrics = self.path / "metrics.parquet"
        self.checkpoints = self.path / "checkpoints"
        self.tb = self.path / "tb"
        self.curve = self.path / "curve.png"
        self.summary = self.path / "summary.md"

    def checkpoint_dirs(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        if not self.checkpoints.is_dir():
            return []
        found = [
            p
            for p in self.checkpoints.iterdir()
            if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX)
        ]
        return sorted(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]))

    def latest_checkpoint(self) -> Path | None:
        dirs = self.checkpoint_dirs()
        return dirs[-1] if dirs else None

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics.is_file():
            return []
        import pandas as pd

        return pd.read_parquet(self.metrics).to_dict("records")

    def write_metrics(self, rows: list[dict[str, Any]]) -> None:
        import pandas as pd

        tmp = self.metrics.with_suffix(".parquet.tmp")
        pd.DataFrame(rows).to_parquet(tmp, index=False)
        os.replace(tmp, self.metrics)

    def save_checkpoint(self, algo: Any, iteration: int, keep: int) -> Path:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        final = self.checkpoints / f"{CHECKPOINT_PREFIX}{iteration:06d}"
        tmp = self.checkpoints / f".tmp_{final.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        algo.save_to_path(str(tmp.resolve()))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in self.checkpoint_dirs()[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final


def flatten(result: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "/"))
        else:
            out[name] = value
    return out


def _scalar(value: Any) -> float | None:
    if hasattr(value, "item"):
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


def metrics_row(result: dict[str, Any], algo: Any) -> dict[str, Any]:
    """One metrics.parquet row from an RLlib result dict (new API stack layout)."""
    flat = flatten(result)

    def get(*keys: str, default: float = math.nan) -> float:
        for k in keys:
            v = _scalar(flat.get(k))
            if v is not None:
                return v
        return default

    row: dict[str, Any] = {
        "training_iteration": int(result.get("training_iteration", algo.iteration)),
        "env_steps_sampled": int(
            get(
                "env_runners/num_env_steps_sampled_lifetime",
                "num_env_steps_sampled_lifetime",
                default=0,
            )
        ),
        "episode_return_mean": get("env_runners/episode_return_mean"),
        "episode_len_mean": get("env_runners/episode_len_mean"),
        "num_episodes": get("env_runners/num_episodes", default=0.0),
        "time_total_s": get("time_total_s", default=0.0),
        "time_this_iter_s": get("time_this_iter_s", default=0.0),
        "env_step_failures": get("env_runners/num_env_step_failures", default=0.0),
        "env_runner_restarts": float(
            getattr(algo, "_counters", {}).get("total_num_restored_workers", 0)
        ),
    }
    group = algo.env_runner_group
    healthy = group.num_healthy_remote_workers() if group is not None else 0
    row["healthy_env_runners"] = float(healthy)
    row["env_runners_down"] = float(algo.config.num_env_runners - healthy)
    for key in sorted(flat):
        if key.startswith("env_runners/inner_") or key.startswith("env_runners/memory/"):
            v = _scalar(flat[key])
            if v is not None:
                row[key.split("/", 1)[1].replace("/", "_")] = v
        elif key.startswith("learners/") and key.count("/") == 2:
            _, module_id, name = key.split("/")
            v = _scalar(flat[key])
            if v is not None and module_id != "__all_modules__":
                row[
                    f"learner_{name}"
                    if module_id == "default_policy"
                    else f"learner_{module_id}_{name}"
                ] = v
    return row


def progress_line(row: dict[str, Any], stop_iters: int, steps_per_s: float) -> str:
    it = row["training_iteration"]
    parts = [
        f"iter {it}" + (f"/{stop_iters}" if stop_iters else ""),
        f"steps {row['env_steps_sampled']:,}",
        f"return {row['episode_return_mean']:.3f}",
        f"len {row['episode_len_mean']:.1f}",
    ]
    inner = [
        row[k]
        for k in (f"inner_return_{i}" for i in range(10))
        if k in row and math.isfinite(row[k])
    ]
    if len(inner) >= 2:  # the first inner episodes of a trial: later ones are better with memory
        parts.append("inner ep0-3 " + " ".join(f"{v:.2f}" for v in inner[:4]))
    if "learner_total_loss" in row:
        parts.append(f"loss {row['learner_total_loss']:.3f}")
    if row["env_runner_restarts"] or row["env_step_failures"] or row["env_runners_down"]:
        parts.append(
            f"runners down {row['env_runners_down']:.0f} restarts {row['env_runner_restarts']:.0f}"
            f" env-failures {row['env_step_failures']:.0f}"
        )
    parts.append(f"{steps_per_s:,.0f} steps/s")
    parts.append(f"{row['time_total_s']:.0f}s")
    return " | ".join(parts)


def summary_table(rows: list[dict[str, Any]], run_dir: RunDir, wall_s: float) -> str:
    from memrl.experiment.report import format_table

    last = rows[-1]
    best = max(
        rows,
        key=lambda r: (
            -math.inf if math.isnan(r["episode_return_mean"]) else r["episode_return_mean"]
        ),
    )
    summary = [
        {
            "iterations": last["training_iteration"],
            "env_steps": last["env_steps_sampled"],
            "return_last": last["episode_return_mean"],
            "return_best": best["episode_return_mean"],
            "best_iter": best["training_iteration"],
            "len_last": last["episode_len_mean"],
            "wall_s": round(wall_s, 1),
            "steps_per_s": last["env_steps_sampled"] / max(last["time_total_s"], 1e-9),
            "restarts": last["env_runner_restarts"],
        }
    ]
    inner = {k: v for k, v in last.items() if k.startswith("inner_return_") and math.isfinite(v)}
    table = format_table(summary)
    if inner:
        table += "\n\nReturn per inner-episode index (last iteration):\n" + format_table([inner])
    line = memory_line(rows)
    if line:
        table += "\n\n" + line
    return table


def memory_line(rows: list[dict[str, Any]]) -> str | None:
    """One sentence on memory use for envs with inner episodes: the return of inner episodes 1-4
    against the first one of the same trials, over the last iterations (a tenth, at least 3)."""
    recent = rows[-max(3, len(rows) // 10) :]

    def mean_of(key: str) -> float:
        values = [r[key] for r in recent if key in r and math.isfinite(r[key])]
        return sum(values) / len(values) if values else math.nan

    first = mean_of("inner_return_0")
    later = [v for v in (mean_of(f"inner_return_{k}") for k in range(1, 5)) if math.isfinite(v)]
    if not math.isfinite(first) or not later:
        return None
    later_mean = sum(later) / len(later)
    change = (later_mean - first) / abs(first) if first else math.inf
    which = "1" if len(later) == 1 else f"1-{len(later)}"
    head = (
        f"memory: later inner episodes ({which}) return {later_mean:.2f} on average against "
        f"{first:.2f} for the first one of the same trials ({change:+.0%}, last {len(recent)} "
        "iterations)"
    )
    if change >= 0.1:
        return head + (
            ": the agent does better once it has seen the layout (without memory the two "
            "would be equal)."
        )
    return head + ": no clear sign of memory use yet (with memory, later ones do better)."


def train(
    exp: ExperimentConfig,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
    address: str | None = None,
    dashboard: bool = False,
    echo: Any = print,
) -> RunDir:
    """Trains an experiment to its stop criteria; returns its run directory.

    Raises:
        ValueError: bad config or resources, an existing run without --resume, or --resume with
            nothing to resume.
    """
    run = RunDir(run_dir or exp.run_dir)
    rows: list[dict[str, Any]] = []
    checkpoint = None
    if resume:
        if not run.config.is_file():
            raise ValueError(
                f"--resume: {run.path} has no config.yaml; nothing to resume. "
                "Drop --resume to start a new run."
            )
        saved = parse_config(yaml.safe_load(run.config.read_text()))
        exp = replace(
            saved,
            run=replace(
                saved.run,
                stop_iters=exp.run.stop_iters,
                stop_timesteps=exp.run.stop_timesteps,
                stop_seconds=exp.run.stop_seconds,
            ),
        )
        checkpoint = run.latest_checkpoint()
        if checkpoint is not None:
            done = int(checkpoint.name[len(CHECKPOINT_PREFIX) :])
            rows = [r for r in run.read_metrics() if r["training_iteration"] <= done]
    elif run.metrics.exists() or run.latest_checkpoint() is not None:
        raise ValueError(
            f"{run.path} already holds a run. Use --resume to continue it, or "
            "another --output (or name) for a new one."
        )
    validate_env(exp)
    run.path.mkdir(parents=True, exist_ok=True)
    run.config.write_text(yaml.safe_dump(exp.to_dict(), sort_keys=False))

    from memrl.experiment.loggers import RunLoggers

    start_wall = time.time()
    with ray_session(address, dashboard=dashboard) as info:
        check_resources(
            exp,
            info.cpus,
            info.gpus,
            where="this machine's Ray" if info.embedded else "the cluster",
        )
        algo_config = build_algorithm_config(exp.located(run.path))
        algo = build_algo(algo_config, run.path / "rllib")
        try:
            if checkpoint is not None:
                echo(f"resuming from {checkpoint} (iteration {algo_iteration(checkpoint)})")
                restore_checkpoint(algo, checkpoint)
            run.write_metrics(rows)
            loggers = RunLoggers(
                exp.run.loggers, run.path, exp.name, exp.to_dict(), first_iteration=algo.iteration
            )
            last_saved = algo.iteration
            while not _should_stop(exp, algo.iteration, rows):
                t0 = time.time()
                result = algo.train()
                row = metrics_row(result, algo)
                steps_before = rows[-1]["env_steps_sampled"] if rows else 0
                rows.append(row)
                run.write_metrics(rows)
                loggers.log(row)
                rate = (row["env_steps_sampled"] - steps_before) / max(time.time() - t0, 1e-9)
                echo(progress_line(row, exp.run.stop_iters, rate))
                if algo.iteration % exp.run.checkpoint_every == 0:
                    run.save_checkpoint(algo, algo.iteration, exp.run.keep_checkpoints)
                    last_saved = algo.iteration
            if algo.iteration != last_saved:
                run.save_checkpoint(algo, algo.iteration, exp.run.keep_checkpoints)
            loggers.close()
        finally:
            algo.stop()
    if rows:
        plot_training_png(rows, run.curve, exp.name)
        table = summary_table(rows, run, time.time() - start_wall)
        run.summary.write_text(f"# {exp.name}\n\n{table}\n")
        echo("\n" + table)
    report = write_run_report(run.path)
    echo(
        f"\nrun directory: {run.path}\n  config.yaml, metrics.parquet, checkpoints/, tb/, "
        f"curve.png, summary.md, report.html\nreport: {report} (open it in a browser; "
        f"`memrl eval {run.path}` adds an evaluation"
        + (" with replays of its trials)" if exp.env.id in REPLAY_ENVS else ")")
    )
    return run


def algo_iteration(checkpoint: Path) -> int:
    return int(checkpoint.name[len(CHECKPOINT_PREFIX) :])


MODULE_COMPONENT = "learner_group/learner/rl_module"


def restore_checkpoint(algo: Any, checkpoint: Path, *, acting_only: bool = False) -> None:
    """Restores an Algorithm from one of memrl's checkpoints and pushes the weights to every env
    runner.

    ``acting_only``: only what acting needs (the RLModule weights and the env runners' state),
    not the optimizer's. A full restore whose optimizer state does not fit the model (a
    checkpoint written by an older memrl, whose layers were laid out differently) falls back to
    that, with a warning: training goes on from the saved weights with fresh optimizer moments.
    """
    path = checkpoint.resolve()
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

        with open(path / "algorithm_state.pkl", "rb") as f:
            algo.set_state(pickle.load(f))
    sync_env_runner_weights(algo)


def sync_env_runner_weights(algo: Any) -> None:
    """Pushes the learner's weights to every env runner (a restore may leave them stale)."""
    if algo.env_runner_group is None:
        return
    algo.env_runner_group.sync_weights(
        from_worker_or_learner_group=algo.learner_group, inference_only=True
    )


def _should_stop(exp: ExperimentConfig, iteration: int, rows: list[dict[str, Any]]) -> bool:
    if exp.run.stop_iters and iteration >= exp.run.stop_iters:
        return True
    steps = rows[-1]["env_steps_sampled"] if rows else 0
    if exp.run.stop_timesteps and steps >= exp.run.stop_timesteps:
        return True
    seconds = rows[-1]["time_total_s"] if rows else 0.0
    return bool(exp.run.stop_seconds and seconds >= exp.run.stop_seconds)


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
