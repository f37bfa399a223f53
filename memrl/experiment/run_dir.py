"""A run directory and its checkpoints: the one owner of every file name and path in them.

A run directory (``<run.output_dir>/<name>``, ``<run.storage>/<name>`` or ``--output``) holds:

- ``config.yaml``: the fully resolved experiment config (what ``--resume`` reads back);
- ``metrics.parquet``: one row per iteration (rewritten atomically after each one);
- ``checkpoints/iter_NNNNNN/``: RLlib checkpoints; one counts only once complete (see RunDir), so
  a kill during a save never leaves a half checkpoint that looks complete, and one with an empty
  state file (a remote learner that died while writing it) never counts; the policy's RLModule
  lies at ``POLICY_MODULE`` inside one;
- ``tb/``: TensorBoard event files (and ``wandb/`` or ``mlruns/`` with those loggers in
  ``run.loggers``, see loggers.py); ``curve.png``: the learning curves; ``summary.md``;
- ``eval/``: what ``memrl eval`` measured; ``report.html``: the run report (run_report.py);
- ``rllib/``: RLlib's own log directory (local only).

The run directory may be a URI of any pyarrow filesystem (``s3://``, ``gs://``, ``file://`` on
shared storage): a later job on another node resumes from there.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memrl.experiment.config import ExperimentConfig, parse_yaml
from memrl.experiment.learner_health import raise_if_learners_lost
from memrl.experiment.tables import frame_of_parquet

CONFIG = "config.yaml"
METRICS = "metrics.parquet"
CHECKPOINTS = "checkpoints"
TB = "tb"
CURVE = "curve.png"
SUMMARY = "summary.md"
REPORT = "report.html"
EVAL = "eval"
"""Folder of ``memrl eval``'s results, replays and transcripts."""
RLLIB_LOGDIR = "rllib"
"""RLlib's Trainable log directory, kept under the run's local directory."""
CHECKPOINT_PREFIX = "iter_"
# RLlib writes an Algorithm checkpoint's own state file after its components; memrl uploads it
# last too. A checkpoint directory without it is incomplete (a save or upload cut short).
STATE_FILE = "algorithm_state.pkl"
# RLlib's state files; none is ever empty (a pickle or msgpack of anything has bytes), so an empty
# one was cut short by a process that died while writing it.
STATE_SUFFIXES = (".pkl", ".msgpack")
MODULE_COMPONENT = "learner_group/learner/rl_module"
"""The learner's RLModule inside an Algorithm checkpoint (a component path RLlib restores)."""
POLICY_MODULE = f"{MODULE_COMPONENT}/default_policy"
"""The policy's RLModule inside a checkpoint: ``RLModule.from_checkpoint`` loads it alone."""


def checkpoint_name(iteration: int) -> str:
    """The directory name of the checkpoint of an iteration (12 -> ``iter_000012``)."""
    return f"{CHECKPOINT_PREFIX}{iteration:06d}"


def is_checkpoint_name(name: str) -> bool:
    """Whether a directory name is one of a checkpoint (``iter_`` and digits)."""
    return name.startswith(CHECKPOINT_PREFIX) and name[len(CHECKPOINT_PREFIX) :].isdigit()


def _empty_state_files(fs: Any, root: str) -> list[str]:
    """The empty state files under ``root`` on a pyarrow filesystem, relative to it."""
    import pyarrow.fs as pafs

    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    return sorted(
        info.path[len(root) :].lstrip("/")
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File
        and info.size == 0
        and info.base_name.endswith(STATE_SUFFIXES)
    )


def checkpoint_iteration(name: str) -> int:
    """The iteration of a checkpoint directory name (``iter_000012`` -> 12)."""
    return int(name[len(CHECKPOINT_PREFIX) :])


def policy_module_dir(checkpoint: str | os.PathLike[str]) -> Path:
    """The absolute directory of the policy's RLModule in a local checkpoint (RLlib reads a
    relative path as a URI without a scheme and fails)."""
    return (Path(checkpoint) / POLICY_MODULE).resolve()


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

    def read_config(self) -> dict[str, Any]:
        """The run's config.yaml as a dict (what ``parse_config`` validates).

        Raises:
            ValueError: the file is not text, not YAML or not a mapping (the message names it).
        """
        where = self.uri(CONFIG)
        try:
            data = parse_yaml(self.read_text(CONFIG))
        except ValueError as err:  # UnicodeDecodeError is one too
            raise ValueError(
                f"{where} cannot be read ({err}); it is the config `memrl train` wrote for the "
                "run: repair it, or write it again from the experiment YAML the run was started "
                "with"
            ) from None
        if not isinstance(data, dict):
            raise ValueError(
                f"{where} must hold a mapping (the run's config), got {type(data).__name__}"
            )
        return data

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
            return frame_of_parquet(f.read(), self.uri(METRICS)).to_dict("records")

    def write_metrics(self, rows: list[dict[str, Any]]) -> None:
        self.write_rows(METRICS, rows)

    def write_rows(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Writes rows as a parquet table (replacing the file atomically)."""
        import pandas as pd

        buf = io.BytesIO()
        pd.DataFrame(rows).to_parquet(buf, index=False)
        self.write_bytes(name, buf.getvalue())

    def checkpoint_names(self) -> list[str]:
        """Complete checkpoints, oldest first: with their state file and no empty state file."""
        return [n for n in self.saved_checkpoints() if not self.empty_state_files(n)]

    def saved_checkpoints(self) -> list[str]:
        """Checkpoints whose save finished (their state file is there), oldest first, whether
        or not their files are still intact (checkpoint_check.py reads them before use)."""
        return [n for n in self.checkpoint_dirs() if self.exists(CHECKPOINTS, n, STATE_FILE)]

    def empty_state_files(self, name: str) -> list[str]:
        """The state files of a checkpoint directory that are empty, relative to it.

        RLlib's save returns normally when a remote learner dies while writing its part (it
        only marks the actor unhealthy), leaving e.g. ``module_state.pkl`` empty in a checkpoint
        whose own state file was then written: such a checkpoint cannot be restored.
        """
        return _empty_state_files(self.fs, self.at(CHECKPOINTS, name))

    def checkpoint_dirs(self) -> list[str]:
        """Every checkpoint directory, complete or not, oldest first."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.at(CHECKPOINTS), allow_not_found=True)
        names = [
            info.base_name
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.Directory and is_checkpoint_name(info.base_name)
        ]
        return sorted(names, key=checkpoint_iteration)

    def save_checkpoint(self, algo: Any, iteration: int, keep: int) -> str:
        """Saves the algorithm as ``checkpoints/iter_NNNNNN``; keeps the newest ``keep``.

        Once the algorithm has written the checkpoint and before it counts (is uploaded or
        renamed into place), a remote learner lost meanwhile or an empty state file raises
        (RLlib's save returns normally when its learner dies mid-write); no checkpoint of this
        iteration counts then.
        """
        import pyarrow.fs as pafs

        name = checkpoint_name(iteration)
        final = self.at(CHECKPOINTS, name)

        def check(written: Path) -> None:
            raise_if_learners_lost(algo, "while it was checkpointed")
            empty = _empty_state_files(pafs.LocalFileSystem(), written.resolve().as_posix())
            if empty:
                raise RuntimeError(
                    f"the checkpoint of iteration {iteration} was written with empty state "
                    f"files ({', '.join(empty)}): a process died while writing them; it is not kept"
                )

        if self.staged:
            with tempfile.TemporaryDirectory(prefix="memrl-ckpt-") as tmp:
                algo.save_to_path(tmp)
                check(Path(tmp))
                if self.exists(CHECKPOINTS, name):  # a partial upload of an earlier attempt
                    self.fs.delete_dir(final)
                self._upload(Path(tmp), final)
        else:
            local = Path(self.root) / CHECKPOINTS
            local.mkdir(parents=True, exist_ok=True)
            tmp = local / f".tmp_{name}"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                algo.save_to_path(str(tmp))
                check(tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
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
