"""Run directories on pyarrow filesystems: a local path and a file:// URI (standing for shared or
cloud storage, which takes the same upload path as s3:// or gs://)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from memrl_testing import TINY

from memrl.experiment.config import parse_config
from memrl.experiment.run_dir import (
    STATE_FILE,
    RunDir,
    local_dir,
    open_filesystem,
    run_location,
)
from memrl.experiment.tables import read_table


class Saver:
    """What RunDir needs of an Algorithm: ``save_to_path`` writing RLlib's checkpoint layout
    (components first, the state file last)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def save_to_path(self, path: str) -> None:
        root = Path(path)
        (root / "learner_group" / "learner").mkdir(parents=True, exist_ok=True)
        (root / "learner_group" / "learner" / "weights.bin").write_text(self.tag)
        (root / "metadata.json").write_text("{}")
        (root / STATE_FILE).write_text(self.tag)


def _locations(tmp_path: Path) -> list[tuple[str, Path]]:
    return [
        (str(tmp_path / "plain" / "run"), tmp_path / "plain" / "run"),
        ((tmp_path / "shared" / "run").as_uri(), tmp_path / "shared" / "run"),
    ]


@pytest.mark.parametrize("kind", ["path", "file-uri"])
def test_files_and_checkpoints_round_trip(tmp_path, kind):
    location, on_disk = _locations(tmp_path)[kind == "file-uri"]
    run = RunDir(location, tmp_path / "local")
    assert run.staged == (kind == "file-uri")
    run.write_text("config.yaml", "name: x\n")
    rows = [{"training_iteration": i, "episode_return_mean": 0.5 * i} for i in (1, 2)]
    run.write_metrics(rows)
    assert run.read_text("config.yaml") == "name: x\n" and run.read_metrics() == rows
    assert (on_disk / "config.yaml").is_file() and (on_disk / "metrics.parquet").is_file()
    for it in (2, 4, 6):
        run.save_checkpoint(Saver(f"w{it}"), it, keep=2)
    assert run.checkpoint_names() == ["iter_000004", "iter_000006"]  # keep=2 pruned iter 2
    assert sorted(p.name for p in (on_disk / "checkpoints").iterdir()) == run.checkpoint_names()
    with run.local_checkpoint(run.checkpoint_names()[-1]) as ckpt:
        assert (ckpt / "learner_group" / "learner" / "weights.bin").read_text() == "w6"
        assert (ckpt / STATE_FILE).is_file()
    # Nothing but the local dir's own files (none yet) lands outside the location.
    assert not (tmp_path / "local").exists() or not any((tmp_path / "local").iterdir())


def test_nested_files_download_and_listing_on_a_uri(tmp_path):
    run = RunDir((tmp_path / "shared" / "run").as_uri(), tmp_path / "local")
    run.write_text("config.yaml", "name: x\n")
    run.write_text("eval/iter_000002.json", "{}")
    assert (tmp_path / "shared" / "run" / "eval" / "iter_000002.json").read_text() == "{}"
    assert not list((tmp_path / "shared" / "run" / "eval").glob(".*"))  # no temp file left
    assert run.top_level() == ["config.yaml", "eval"]
    assert run.download("eval", tmp_path / "copy" / "eval")
    assert (tmp_path / "copy" / "eval" / "iter_000002.json").read_text() == "{}"
    assert run.download("config.yaml", tmp_path / "copy" / "config.yaml")
    assert not run.download("metrics.parquet", tmp_path / "copy" / "metrics.parquet")
    assert RunDir(tmp_path / "nothing").top_level() == []


def test_an_upload_cut_short_is_not_a_checkpoint_and_is_cleaned_up(tmp_path, monkeypatch):
    run = RunDir((tmp_path / "shared" / "run").as_uri(), tmp_path / "local")
    run.save_checkpoint(Saver("w2"), 2, keep=3)
    import pyarrow.fs as pafs

    copied: list[str] = []
    original = pafs.copy_files

    def copy_then_fail(src, dest, **kw):
        if copied:  # the machine goes away after the first file of the upload
            raise OSError("connection reset")
        copied.append(dest)
        return original(src, dest, **kw)

    monkeypatch.setattr(pafs, "copy_files", copy_then_fail)
    with pytest.raises(OSError, match="connection reset"):
        run.save_checkpoint(Saver("w4"), 4, keep=3)
    monkeypatch.undo()
    assert not copied[0].endswith(STATE_FILE)  # the state file goes last ...
    assert (tmp_path / "shared" / "run" / "checkpoints" / "iter_000004").is_dir()
    assert run.checkpoint_names() == ["iter_000002"]  # ... so the partial one does not count
    assert run.saved_checkpoints() == ["iter_000002"]
    run.save_checkpoint(Saver("w3"), 3, keep=3)  # a resumed run redoes iteration 3 ...
    assert run.checkpoint_names() == ["iter_000002", "iter_000003"]
    run.save_checkpoint(Saver("w4"), 4, keep=3)  # ... and 4 again, over the partial upload
    with run.local_checkpoint("iter_000004") as ckpt:
        assert (ckpt / "learner_group" / "learner" / "weights.bin").read_text() == "w4"


def test_a_kill_during_a_local_save_leaves_no_complete_looking_checkpoint(tmp_path):
    run = RunDir(tmp_path / "run")
    run.save_checkpoint(Saver("w1"), 1, keep=3)
    half = tmp_path / "run" / "checkpoints" / "iter_000002"
    (half / "learner_group").mkdir(parents=True)  # a save cut short: no state file
    (tmp_path / "run" / "checkpoints" / ".tmp_iter_000003").mkdir()
    assert run.checkpoint_names() == ["iter_000001"]
    run.save_checkpoint(Saver("w5"), 5, keep=3)
    assert not half.exists()  # the incomplete older one is removed once a newer one is saved
    assert run.checkpoint_names() == ["iter_000001", "iter_000005"]


class DiesWhileWriting(Saver):
    """A save whose learner died while writing its weights: RLlib returns normally, leaving the
    learner's state file empty and the checkpoint's own state file written."""

    def save_to_path(self, path: str) -> None:
        super().save_to_path(path)
        (Path(path) / "learner_group" / "learner" / "module_state.pkl").write_bytes(b"")


@pytest.mark.parametrize("kind", ["path", "file-uri"])
def test_a_save_with_an_empty_state_file_does_not_count(tmp_path, kind):
    location, on_disk = _locations(tmp_path)[kind == "file-uri"]
    run = RunDir(location, tmp_path / "local")
    run.save_checkpoint(Saver("w2"), 2, keep=3)
    with pytest.raises(RuntimeError, match=r"empty state files \(learner_group/learner/module_"):
        run.save_checkpoint(DiesWhileWriting("w4"), 4, keep=3)
    assert run.checkpoint_names() == ["iter_000002"]
    assert not (on_disk / "checkpoints" / "iter_000004").exists()
    assert sorted(p.name for p in (on_disk / "checkpoints").iterdir()) == ["iter_000002"]


@pytest.mark.parametrize("kind", ["path", "file-uri"])
def test_a_checkpoint_with_an_empty_state_file_is_not_resumed_from(tmp_path, kind):
    """One written by an earlier memrl, before saves were checked: it does not count as
    complete (resume passes over it, saying so: see test_checkpoint_check.py), and the next save
    removes it."""
    location, on_disk = _locations(tmp_path)[kind == "file-uri"]
    run = RunDir(location, tmp_path / "local")
    for it in (2, 4):
        run.save_checkpoint(Saver(f"w{it}"), it, keep=3)
    damaged = on_disk / "checkpoints" / "iter_000004" / "learner_group" / "learner" / "state.pkl"
    damaged.write_bytes(b"")
    assert run.empty_state_files("iter_000004") == ["learner_group/learner/state.pkl"]
    assert run.empty_state_files("iter_000002") == []
    assert run.checkpoint_names() == ["iter_000002"]
    assert run.saved_checkpoints() == ["iter_000002", "iter_000004"]
    run.save_checkpoint(Saver("w3"), 3, keep=3)
    run.save_checkpoint(Saver("w4"), 4, keep=3)  # the resumed run redoes it
    assert run.checkpoint_names() == ["iter_000002", "iter_000003", "iter_000004"]
    assert not damaged.exists()


def test_where_a_run_goes(tmp_path):
    exp = parse_config({**TINY, "run": {"output_dir": str(tmp_path / "runs")}})
    assert run_location(exp) == str(tmp_path / "runs" / "tiny")
    assert run_location(exp, "s3://bucket/runs/x") == "s3://bucket/runs/x"
    stored = parse_config({**TINY, "run": {"storage": "gs://bucket/runs/", "output_dir": "loc"}})
    assert run_location(stored) == "gs://bucket/runs/tiny"
    assert local_dir(stored, "gs://bucket/runs/tiny") == Path("loc") / "tiny"
    assert local_dir(exp, str(tmp_path / "r")) == tmp_path / "r"
    with pytest.raises(ValueError, match="run.storage must be a directory or a URI"):
        parse_config({**TINY, "run": {"storage": "s3:/bucket"}})
    with pytest.raises(ValueError, match="cannot open the run storage 'nosuch://x'"):
        open_filesystem("nosuch://x")
    with pytest.raises(ValueError, match="needs a local directory"):
        RunDir("file:///tmp/x")


def test_metrics_read_whole_while_the_run_replaces_them(tmp_path):
    """`memrl compare`, the run report and the tests read metrics.parquet while `memrl train`
    renames a new version over it every iteration: each read must see one version whole (reading
    the path with pandas fails ~10% of the time here: the old file's size, the new file's bytes)."""
    run = RunDir(tmp_path / "run")
    rows = [{"training_iteration": 0, "note": ""}]
    run.write_metrics(rows)
    writes = 0
    done = threading.Event()

    def train() -> None:
        nonlocal writes
        while not done.is_set():
            # Rows of varying width, so that consecutive versions differ in size.
            rows.append({"training_iteration": len(rows), "note": "x" * (len(rows) % 37)})
            run.write_metrics(rows)
            writes += 1

    writer = threading.Thread(target=train)
    writer.start()
    seen = []
    try:
        for _ in range(400):
            seen.append(len(read_table(tmp_path / "run" / "metrics.parquet")))
            seen.append(len(run.read_metrics()))
    finally:
        done.set()
        writer.join()
    assert writes >= 50, f"only {writes} writes overlapped the reads"
    assert seen == sorted(seen) and seen[-1] > seen[0]  # every read a whole, newer version
