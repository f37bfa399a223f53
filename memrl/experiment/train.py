"""`memrl train`: one experiment, from config to checkpoints, metrics and a learning curve.

The loop: parse and check the config, start (or join) Ray, build the Algorithm, then train,
writing a metrics row and a progress line per iteration and a checkpoint every
``run.checkpoint_every`` iterations, until a stop criterion, SIGTERM or a lost learner
(interrupts.py). What the run directory holds is described in run_dir.py.

``--resume`` continues from the newest intact checkpoint, checked against the run's config first
(checkpoint_check.py): the iteration counter goes on, rows of iterations after that checkpoint
(whose effects were lost with the kill) are dropped and redone, and the restored weights are
pushed to every env runner explicitly.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from dataclasses import replace
from typing import Any

import yaml

from memrl.experiment.build import build_algorithm_config, check_resources, validate_env
from memrl.experiment.checkpoint_check import check_checkpoint, intact_checkpoint
from memrl.experiment.checkpoints import build_algo, restore_checkpoint
from memrl.experiment.config import ExperimentConfig, parse_config
from memrl.experiment.interrupts import StopOnSigterm, lost_learner_ends_run
from memrl.experiment.progress import metrics_row, progress_line, summary_table
from memrl.experiment.ray_session import ray_session
from memrl.experiment.replay import REPLAY_ENVS
from memrl.experiment.run_dir import (
    CHECKPOINTS,
    CONFIG,
    CURVE,
    METRICS,
    REPORT,
    RLLIB_LOGDIR,
    SUMMARY,
    TB,
    RunDir,
    checkpoint_iteration,
    local_dir,
    run_location,
)
from memrl.experiment.run_plots import plot_training_png
from memrl.experiment.run_report import refresh_report


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

    ``run_dir``: where the run goes (a path or a URI; default: see ``run_location``).

    ``resume`` continues from the newest intact checkpoint (an older one, said so, when the
    newest is damaged), once it is checked against the run's config (checkpoint_check.py).

    Raises:
        ValueError: bad config or resources, an existing run without --resume, --resume with
            nothing to resume, or a checkpoint that is damaged or does not fit the config.
        RunInterrupted: an actor training cannot do without (a learner) was lost.
    """
    # A URI run's checkpoint is copied here once, for the check and for the restore.
    with contextlib.ExitStack() as copies:
        return _train(exp, run_dir, resume, address, dashboard, echo, copies)


def _train(
    exp: ExperimentConfig,
    run_dir: str | os.PathLike[str] | None,
    resume: bool,
    address: str | None,
    dashboard: bool,
    echo: Any,
    copies: contextlib.ExitStack,
) -> RunDir:
    location = run_location(exp, run_dir)
    run = RunDir(location, local_dir(exp, location))
    rows: list[dict[str, Any]] = []
    checkpoint = path = None
    if resume:
        if not run.exists(CONFIG):
            raise ValueError(
                f"--resume: {run.location} has no {CONFIG}; nothing to resume. "
                "Drop --resume to start a new run."
            )
        saved = parse_config(run.read_config())
        exp = replace(
            saved,
            run=replace(
                saved.run,
                stop_iters=exp.run.stop_iters,
                stop_timesteps=exp.run.stop_timesteps,
                stop_seconds=exp.run.stop_seconds,
            ),
        )
        names = run.saved_checkpoints()
        if names:
            checkpoint, path = intact_checkpoint(
                run, names, lambda name: copies.enter_context(run.local_checkpoint(name)), echo
            )
            done = checkpoint_iteration(checkpoint)
            rows = [r for r in run.read_metrics() if r["training_iteration"] <= done]
    elif run.exists(METRICS) or run.checkpoint_dirs():
        raise ValueError(
            f"{run.location} already holds a run. Use --resume to continue it, or "
            "another --output (or name) for a new one."
        )
    validate_env(exp)
    run.write_text(CONFIG, yaml.safe_dump(exp.to_dict(), sort_keys=False))

    from memrl.experiment.loggers import RunLoggers

    start_wall = time.time()
    # Mistakes in the config surface here, before Ray starts.
    algo_config = build_algorithm_config(exp.located(run.path))
    if path is not None:
        check_checkpoint(path, exp, algo_config, run.uri(CHECKPOINTS, checkpoint))
    with ray_session(address, dashboard=dashboard) as info:
        check_resources(
            exp,
            info.cpus,
            info.gpus,
            where="this machine's Ray" if info.embedded else "the cluster",
        )
        algo = build_algo(algo_config, run.path / RLLIB_LOGDIR)
        stop_request = StopOnSigterm(echo)
        try:
            if checkpoint is not None:
                echo(
                    f"resuming from {run.uri(CHECKPOINTS, checkpoint)} "
                    f"(iteration {checkpoint_iteration(checkpoint)})"
                )
                restore_checkpoint(algo, path)
            run.write_metrics(rows)
            loggers = RunLoggers(
                exp.run.loggers, run.path, exp.name, exp.to_dict(), first_iteration=algo.iteration
            )
            last_saved = algo.iteration

            def save() -> None:
                # A learner lost while its state is gathered for a checkpoint: the same clear
                # end as a loss during training (the checkpoint being written does not count).
                with lost_learner_ends_run(algo, run, last_saved):
                    run.save_checkpoint(algo, algo.iteration, exp.run.keep_checkpoints)

            with stop_request:
                while not _should_stop(exp, algo.iteration, rows) and not stop_request.requested:
                    t0 = time.time()
                    with lost_learner_ends_run(algo, run, last_saved):
                        result = algo.train()
                    row = metrics_row(result, algo)
                    steps_before = rows[-1]["env_steps_sampled"] if rows else 0
                    rows.append(row)
                    run.write_metrics(rows)
                    loggers.log(row)
                    rate = (row["env_steps_sampled"] - steps_before) / max(time.time() - t0, 1e-9)
                    echo(progress_line(row, exp.run.stop_iters, rate))
                    if algo.iteration % exp.run.checkpoint_every == 0:
                        save()
                        run.sync_tb()
                        last_saved = algo.iteration
            if algo.iteration != last_saved:
                save()
            if stop_request.requested:
                echo(
                    f"stopped on SIGTERM after iteration {algo.iteration}, its checkpoint saved; "
                    f"continue with: memrl train CONFIG --output {run.location} --resume"
                )
            loggers.close()
            run.sync_tb()
        finally:
            algo.stop()
    if rows:
        png = io.BytesIO()
        if plot_training_png(rows, png, exp.name):
            run.write_bytes(CURVE, png.getvalue())
        table = summary_table(rows, time.time() - start_wall, exp.env.id)
        run.write_text(SUMMARY, f"# {exp.name}\n\n{table}\n")
        echo("\n" + table)
    report = refresh_report(run)
    echo(
        f"\nrun directory: {run.location}\n  {CONFIG}, {METRICS}, {CHECKPOINTS}/, {TB}/, "
        f"{CURVE}, {SUMMARY}, {REPORT}\nreport: {report} (open it in a browser; "
        f"`memrl eval {run.location}` adds an evaluation"
        + (" with replays of its trials)" if exp.env.id in REPLAY_ENVS else ")")
    )
    return run


def _should_stop(exp: ExperimentConfig, iteration: int, rows: list[dict[str, Any]]) -> bool:
    if exp.run.stop_iters and iteration >= exp.run.stop_iters:
        return True
    steps = rows[-1]["env_steps_sampled"] if rows else 0
    if exp.run.stop_timesteps and steps >= exp.run.stop_timesteps:
        return True
    seconds = rows[-1]["time_total_s"] if rows else 0.0
    return bool(exp.run.stop_seconds and seconds >= exp.run.stop_seconds)
