"""Writes that leave the old file or the new one, never half of one.

Data commands write their outputs here: each file goes to a temporary name next to its target and
is renamed over it only once complete (``os.replace`` is atomic within a file system), so a
rejected argument, an exception or a crash part-way leaves what was there before untouched. A
file that replaces another keeps the old one's mode; a new file gets the mode any new file gets
(0666 less the umask), not a temporary file's 0600.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def make_folder(folder: str | Path) -> Path:
    """``folder`` created with its parents (kept as it is if it exists).

    Raises:
        ValueError: ``folder`` or one of its parents is an existing file.
    """
    folder = Path(folder)
    for part in (folder, *folder.parents):
        if part.exists() and not part.is_dir():
            raise ValueError(
                f"Cannot write into {str(folder)!r}: {str(part)!r} is a file, not a folder. "
                "Give an output path whose folders are folders (or do not exist yet)."
            )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _temporary_name(target: Path) -> Path:
    """A new empty file next to ``target``, with ``target``'s mode if it exists, else with the
    mode a new file gets (``tempfile.mkstemp`` would make it 0600)."""
    for _ in range(100):
        name = target.parent / f".{target.name}.{secrets.token_hex(4)}.partial"
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        if target.is_file():
            shutil.copymode(target, name)
        return name
    raise FileExistsError(f"no free temporary name next to {str(target)!r}")


@contextlib.contextmanager
def replacing(*targets: str | Path) -> Iterator[list[Path]]:
    """Temporary paths to write instead of ``targets``, renamed onto them if the block succeeds.

    All files are written before the first rename, so a failure while writing any of them leaves
    every target as it was; the temporaries are removed either way.

    Raises:
        ValueError: a target is an existing folder, or a folder on its path is a file.
    """
    paths = [Path(t) for t in targets]
    for path in paths:
        if path.is_dir():
            raise ValueError(f"{str(path)!r} is a folder; give a file path to write.")
        make_folder(path.parent)
    temporaries: list[Path] = []
    try:
        temporaries = [_temporary_name(path) for path in paths]
        yield temporaries
        for temporary, path in zip(temporaries, paths, strict=True):
            os.replace(temporary, path)
    finally:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)


@contextlib.contextmanager
def replacing_files_in(folder: str | Path, manifest: str) -> Iterator[Path]:
    """A temporary folder whose files replace those of the same names in ``folder``.

    Nothing in ``folder`` changes until the block succeeds. Then ``manifest`` (the file that says
    what the folder holds, e.g. ``memrl_index.json``) is removed first and moved in last, so a
    crash during the moves leaves a folder without a manifest (an error on load), never a manifest
    over files that do not belong to it. Files the block does not write are kept.

    Raises:
        ValueError: ``folder`` or one of its parents is an existing file.
    """
    folder = make_folder(folder)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder))
    try:
        yield staging
        (folder / manifest).unlink(missing_ok=True)
        written = sorted(p for p in staging.iterdir() if p.name != manifest)
        for path in [*written, staging / manifest]:
            if path.exists():
                os.replace(path, folder / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
