"""`memrl train`: one experiment, from config to checkpoints, metrics and a learning curve.

A run directory (``<run.output_dir>/<name>``, ``<run.storage>/<name>`` or ``--output``) holds:

- ``config.yaml``: the fully resolved experiment config (what ``--resume`` reads back);
- ``metrics.parquet``: one row per iteration (rewritten atomically after each one);
- ``checkpoints/iter_NNNNNN/``: RLlib checkpoints; one counts only once complete (see RunDir), so
  a kill during a save never leaves a half checkpoint that looks complete;
- ``tb/``: TensorBoard event files (and ``wandb/`` or ``mlruns/`` with those loggers in
  ``run.loggers``, see loggers.py); ``curve.png``: the learning curves; ``summary.md``;
- ``report.html``: the run report (run_report.py), rewritten by ``memrl eval``.

The run directory may be a URI of any pyarrow filesystem (``s3://``, ``gs://``, ``file://`` on
shared storage): a later job on another node resumes from there. ``--resume`` continues from the
newest checkpoint: the iteration counter goes on, rows of iterations after that checkpoint (whose
effects were lost with the kill) are dropped and redone, and the restored weights are pushed to
every env runner explicitly.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from memrl.experiment.build import build_algorithm_config, check_resources, validate_env
from memrl.experiment.config import ExperimentConfig, parse_config
from memrl.experiment.memory_verdict import memory_line, success_line
from memrl.experiment.ray_session import ray_session
from memrl.experiment.replay import REPLAY_ENVS
from memrl.experiment.report import frame_of_parquet
from memrl.experiment.run_plots import plot_training_png
from memrl.experiment.run_report import REPORT_NAME, write_run_report

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "iter_"
CONFIG = "config.yaml"
METRICS = "metrics.parquet"
CHECKPOINTS = "checkpoints"
TB = "tb"
CURVE = "curve.png"
SUMMARY = "summary.md"
# RLlib writes an Algorithm checkpoint's own state file after its components; memrl uploads it
# last too. A checkpoint directory without it is incomplete (a save or upload cut short).
STATE_FILE = "algorithm_state.pkl"


class RunInterrupted(RuntimeError):
    """Training cannot go on (an actor it cannot do without was lost); ``--resume`` continues."""


def is_uri(location: str | os.PathLike[str]) -> bool:
    return "://" in str(location)


def open_filesystem(location: str | os.PathLike[str]) -> tuple[Any, str]:
    """The pyarrow filesystem of a run location (a local path or a URI) and the path in it.

    Raises:
        ValueError: pyarrow does not know the URI's scheme or cannot open it.
    """
    import pyarrow.fs as pafs

    if not is_uri(location):
        return pafs.LocalFileSystem(), Path(location).resolve().as_posix()
    try:
        fs, path = pafs.FileSystem.from_uri(str(location))
    except (ValueError, OSError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(
            f"cannot open the run storage {str(location)!r}: {err}. Expected a local path or a "
            "URI of a pyarrow filesystem (file:///shared/runs, s3://bucket/runs, "
            "gs://bucket/runs), with that cloud's credentials in the environment."
        ) from err
    return fs, path.rstrip("/")


def run_location(exp: ExperimentConfig, output: str | os.PathLike[str] | None = None) -> str:
    """Where a run's files go: ``--output``, else ``<run.storage>/<name>``, else
    ``<run.output_dir>/<name>``."""
    if output:
        return str(output)
    if exp.run.storage:
        return f"{exp.run.storage.rstrip('/')}/{exp.name}"
    return str(exp.run_dir)


def local_dir(exp: ExperimentConfig, location: str) -> Path:
    """The local directory of a run at ``location``: the location itself when it is a path;
    for a URI, ``<run.output_dir>/<the URI's last part>`` (TensorBoard's files before they are
    copied, RLlib's logdir, files a method keeps with the run)."""
    if not is_uri(location):
        return Path(location)
    return Path(exp.run.output_dir) / location.rstrip("/").rsplit("/", 1)[-1]


class RunDir:
    """The files of one run, on any pyarrow filesystem, and the rules for writing them safely.

    ``location`` is a local directory or a URI. Files are replaced atomically (written aside,
    then moved over). A checkpoint counts once its STATE_FILE is there: on a local path it is
    written in ``checkpoints/.tmp_iter_N`` and renamed; for a URI it is written to a local temp
    dir and uploaded with the state file last (object stores cannot rename directories), and
    read back into a local temp dir to restore. ``local`` (default: the location itself, which
    must then be a path) holds what only this machine needs: RLlib's logdir and, for a URI, the
    TensorBoard files until ``sync_tb`` copies them.
    """

    def __init__(
        self, location: str | os.PathLike[str], local: str | os.PathLike[str] | None = None
    ):
        self.location = str(location).rstrip("/") or "/"
        self.staged = is_uri(self.location)
        if self.staged and local is None:
            raise ValueError(f"a run at {self.location} needs a local directory as well")
        self.fs, self.root = open_filesystem(self.location)
        self.path = Path(local) if local is not None else Path(self.location)
        self.tb = self.path / TB

    def at(self, *parts: str) -> str:
        """The filesystem path of a file of the run."""
        return "/".join([self.root, *parts])

    def uri(self, *parts: str) -> str:
        """A file of the run as the user wrote its location (for messages)."""
        return "/".join([self.location, *parts])

    def exists(self, *parts: str) -> bool:
        import pyarrow.fs as pafs

        return self.fs.get_file_info(self.at(*parts)).type != pafs.FileType.NotFound

    def read_text(self, name: str) -> str:
        with self.fs.open_input_stream(self.at(name)) as f:
            return f.read().decode()

    def write_bytes(self, name: str, data: bytes) -> None:
        """Writes a file of the run (``name`` may lie in a folder: ``eval/x.json``)."""
        folder, _, base = name.rpartition("/")
        self.fs.create_dir(self.at(folder) if folder else self.root, recursive=True)
        tmp = self.at(f"{folder}/.{base}.tmp" if folder else f".{base}.tmp")
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        self.fs.move(tmp, self.at(name))

    def download(self, name: str, dest: Path) -> bool:
        """Copies a file or folder of the run to the local ``dest``; False when the run has none."""
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(self.at(name))
        if info.type == pafs.FileType.NotFound:
            return False
        (dest if info.type == pafs.FileType.Directory else dest.parent).mkdir(
            parents=True, exist_ok=True
        )
        pafs.copy_files(
            self.at(name),
            str(dest),
            source_filesystem=self.fs,
            destination_filesystem=pafs.LocalFileSystem(),
        )
        return True

    def top_level(self) -> list[str]:
        """Names of the files and folders directly in the run."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.root, allow_not_found=True)
        return sorted(info.base_name for info in self.fs.get_file_info(selector))

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode())

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.exists(METRICS):
            return []
        with self.fs.open_input_stream(self.at(METRICS)) as f:  # one open: see read_table
            return frame_of_parquet(f.read()).to_dict("records")

    def write_metrics(self, rows: list[dict[str, Any]]) -> None:
        self.write_rows(METRICS, rows)

    def write_rows(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Writes rows as a parquet table (replacing the file atomically)."""
        import pandas as pd

        buf = io.BytesIO()
        pd.DataFrame(rows).to_parquet(buf, index=False)
        self.write_bytes(name, buf.getvalue())

    def checkpoint_names(self) -> list[str]:
        """Complete checkpoints, oldest first."""
        return [n for n in self.checkpoint_dirs() if self.exists(CHECKPOINTS, n, STATE_FILE)]

    def checkpoint_dirs(self) -> list[str]:
        """Every checkpoint directory, complete or not, oldest first."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.at(CHECKPOINTS), allow_not_found=True)
        names = [
            info.base_name
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.Directory
            and info.base_name.startswith(CHECKPOINT_PREFIX)
            and info.base_name[len(CHECKPOINT_PREFIX) :].isdigit()
        ]
        return sorted(names, key=checkpoint_iteration)

    def latest_checkpoint(self) -> str | None:
        names = self.checkpoint_names()
        return names[-1] if names else None

    def save_checkpoint(self, algo: Any, iteration: int, keep: int) -> str:
        """Saves the algorithm as ``checkpoints/iter_NNNNNN``; keeps the newest ``keep``."""
        name = f"{CHECKPOINT_PREFIX}{iteration:06d}"
        final = self.at(CHECKPOINTS, name)
        if self.staged:
            with tempfile.TemporaryDirectory(prefix="memrl-ckpt-") as tmp:
                algo.save_to_path(tmp)
                if self.exists(CHECKPOINTS, name):  # a partial upload of an earlier attempt
                    self.fs.delete_dir(final)
                self._upload(Path(tmp), final)
        else:
            local = Path(self.root) / CHECKPOINTS
            local.mkdir(parents=True, exist_ok=True)
            tmp = local / f".tmp_{name}"
            shutil.rmtree(tmp, ignore_errors=True)
            algo.save_to_path(str(tmp))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        complete = self.checkpoint_names()
        newest = checkpoint_iteration(complete[-1]) if complete else iteration
        for old in self.checkpoint_dirs():
            # Older than the ones kept, or an incomplete one left behind by a kill.
            if old in complete[:-keep] or (
                old not in complete and checkpoint_iteration(old) < newest
            ):
                self.fs.delete_dir(self.at(CHECKPOINTS, old))
        return name

    def _upload(self, src: Path, dest: str) -> None:
        import pyarrow.fs as pafs

        local = pafs.LocalFileSystem()
        files = sorted(p for p in src.rglob("*") if p.is_file())
        files.sort(key=lambda p: p.relative_to(src).as_posix() == STATE_FILE)  # the state last
        for f in files:
            target = f"{dest}/{f.relative_to(src).as_posix()}"
            self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            pafs.copy_files(
                f.as_posix(), target, source_filesystem=local, destination_filesystem=self.fs
            )

    @contextlib.contextmanager
    def local_checkpoint(self, name: str) -> Iterator[Path]:
        """The checkpoint as a local directory (a URI run's is downloaded for the block)."""
        if not self.staged:
            yield Path(self.root) / CHECKPOINTS / name
            return
        import pyarrow.fs as pafs

        with tempfile.TemporaryDirectory(prefix="memrl-ckpt-") as tmp:
            pafs.copy_files(
                self.at(CHECKPOINTS, name),
                tmp,
                source_filesystem=self.fs,
                destination_filesystem=pafs.LocalFileSystem(),
            )
            yield Path(tmp)

    def sync_tb(self) -> None:
        """Copies a URI run's local TensorBoard files to its location (no-op for a path)."""
        if self.staged and self.tb.is_dir():
            self._upload(self.tb, self.at(TB))


def checkpoint_iteration(name: str) -> int:
    """The iteration of a checkpoint directory name (``iter_000012`` -> 12)."""
    return int(name[len(CHECKPOINT_PREFIX) :])


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


def refresh_report(
    run: RunDir, output: str | os.PathLike[str] | None = None, *, local_copy: bool = False
) -> str:
    """Writes the run's report.html (or ``output``); for a run on a URI, from a local copy of
    what it reads (``local_copy``: ``run.path`` already holds it, else it is downloaded), and
    uploaded to the run unless ``output`` is given."""
    if not run.staged:
        return str(write_run_report(run.path, output))
    with contextlib.ExitStack() as stack:
        source = run.path
        if not local_copy:
            source = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memrl-report-")))
            for name in (CONFIG, METRICS, "eval"):
                run.download(name, source / name)
        page = write_run_report(source, output)
        if output:
            return str(page)
        run.write_bytes(REPORT_NAME, page.read_bytes())
    return run.uri(REPORT_NAME)


def report_at(
    location: str | os.PathLike[str], output: str | os.PathLike[str] | None = None
) -> str:
    """`memrl report`: the report of the run at ``location`` (a path or a URI), written to
    ``output`` or else to the run's own report.html; returns where it went.

    Raises:
        FileNotFoundError: ``location`` holds no run (no config.yaml).
    """
    if not is_uri(location):
        return str(write_run_report(location, output))
    with tempfile.TemporaryDirectory(prefix="memrl-report-") as tmp:
        run = RunDir(location, tmp)
        if not run.exists(CONFIG):
            raise FileNotFoundError(
                f"{run.location} is not a run directory (it has no config.yaml); give the "
                "location that `memrl train --output` wrote to"
            )
        return refresh_report(run, output)


def summary_table(
    rows: list[dict[str, Any]], run_dir: RunDir, wall_s: float, env_id: str | None = None
) -> str:
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
    inner = {
        k: v
        for k, v in last.items()
        if re.fullmatch(r"inner_return_(\d+|later)", k) and math.isfinite(v)
    }
    table = format_table(summary)
    if inner:
        table += "\n\nReturn per inner-episode index (last iteration):\n" + format_table([inner])
    line = memory_line(rows)
    if line is None and env_id is not None:
        line = success_line(rows, env_id)
    if line:
        table += "\n\n" + line
    return table


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

    Raises:
        ValueError: bad config or resources, an existing run without --resume, or --resume with
            nothing to resume.
        RunInterrupted: an actor training cannot do without (a learner) was lost.
    """
    location = run_location(exp, run_dir)
    run = RunDir(location, local_dir(exp, location))
    rows: list[dict[str, Any]] = []
    checkpoint = None
    if resume:
        if not run.exists(CONFIG):
            raise ValueError(
                f"--resume: {run.location} has no {CONFIG}; nothing to resume. "
                "Drop --resume to start a new run."
            )
        saved = parse_config(yaml.safe_load(run.read_text(CONFIG)))
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
    with ray_session(address, dashboard=dashboard) as info:
        check_resources(
            exp,
            info.cpus,
            info.gpus,
            where="this machine's Ray" if info.embedded else "the cluster",
        )
        algo = build_algo(algo_config, run.path / "rllib")
        stop_request = StopOnSigterm(echo)
        try:
            if checkpoint is not None:
                echo(
                    f"resuming from {run.uri(CHECKPOINTS, checkpoint)} "
                    f"(iteration {checkpoint_iteration(checkpoint)})"
                )
                with run.local_checkpoint(checkpoint) as path:
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
        table = summary_table(rows, run, time.time() - start_wall, exp.env.id)
        run.write_text(SUMMARY, f"# {exp.name}\n\n{table}\n")
        echo("\n" + table)
    report = refresh_report(run)
    echo(
        f"\nrun directory: {run.location}\n  {CONFIG}, {METRICS}, {CHECKPOINTS}/, {TB}/, "
        f"{CURVE}, {SUMMARY}, {REPORT_NAME}\nreport: {report} (open it in a browser; "
        f"`memrl eval {run.location}` adds an evaluation"
        + (" with replays of its trials)" if exp.env.id in REPLAY_ENVS else ")")
    )
    return run


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


def learner_health(algo: Any) -> tuple[int, int] | None:
    """(alive, total) remote learners of the algorithm; None for a local learner."""
    group = getattr(algo, "learner_group", None)
    if group is None or group.is_local:
        return None
    manager = group._worker_manager
    return manager.num_healthy_actors(), manager.num_actors()


def learners_lost(algo: Any) -> bool:
    """Whether one of the algorithm's remote learners is marked unhealthy (dead)."""
    health = learner_health(algo)
    return health is not None and health[0] < health[1]


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


MODULE_COMPONENT = "learner_group/learner/rl_module"


def restore_checkpoint(algo: Any, checkpoint: Path, *, acting_only: bool = False) -> None:
    """Restores an Algorithm from one of memrl's checkpoints and pushes the weights to every env
    runner.

    ``acting_only``: only what acting needs (the RLModule weights and the env runners' state),
    not the optimizer's. A full restore whose optimizer state does not fit the model (a
    checkpoint written by an older memrl, whose layers were laid out differently) falls back to
    that, with a warning: training goes on from the saved weights with fresh optimizer moments.
    """
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
