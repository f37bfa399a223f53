"""Breaks the core math of Memo and MEM1 on purpose, one line at a time, and checks that the fast
tests notice each breakage.

Every entry of ``CATALOGUE`` is a plausible single-line bug: a sign, an offset, a mask, a
normalization, a statistic taken over the wrong set. For each one, the line is replaced in a
scratch copy of the repository (the working tree, untracked files included, never the checkout
itself) and the method's fast tests run there (``-m "not slow and not gpu"``, stopping at the first
failure). A breakage is *caught* when a test fails (or the run hangs past ``--timeout``) and
*survives* when every test passes: then some behaviour of the core math has no test, and a
person could ship that bug. Before the first breakage the same tests run unbroken, so a failure
that has nothing to do with a breakage cannot pass for a catch.

    make mutate                                  # the whole catalogue, 10-15 minutes on 2 cores
    .venv/bin/python scripts/mutate.py --only memo-kl-sign --only mem1-ddp-scale
    .venv/bin/python scripts/mutate.py --list    # the catalogue, without running anything

Prints one line per breakage (caught or survived, the first failing test, seconds) and a count.
Exit code: 0 when every breakage was caught, 1 when one survived, 2 for a usage error or a
baseline that fails (see docs/testing.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutate_catalogue import CATALOGUE, FAST, Breakage  # noqa: E402

__all__ = ["CATALOGUE", "Breakage", "apply", "main", "scratch_copy"]


def scratch_copy(dest: Path) -> None:
    """The working tree's files (tracked and untracked, not ignored) copied under ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a deleted file is still listed until it is staged
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def apply(root: Path, breakage: Breakage) -> str:
    """Breaks ``breakage.path`` under ``root``; returns the file's correct text."""
    path = root / breakage.path
    text = path.read_text()
    pattern = re.compile(rf"^([ \t]*){re.escape(breakage.line)}[ \t]*$", re.MULTILINE)
    found = list(pattern.finditer(text))
    nth = breakage.nth or 1
    if (breakage.nth is None and len(found) != 1) or len(found) < nth:
        raise ValueError(
            f"breakage {breakage.name!r}: the line {breakage.line!r} occurs {len(found)} times "
            f"in {breakage.path} (expected {'once' if breakage.nth is None else nth}); update "
            "the catalogue to the code"
        )
    match = found[nth - 1]
    broken = match.group(1) + breakage.broken
    path.write_text(text[: match.start()] + broken + text[match.end() :])
    return text


def run_tests(root: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[str, str]:
    """Runs ``tests`` in ``root``; returns (outcome, detail): outcome "passed", "failed" (the
    first failing test in detail) or "timeout"."""
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", FAST]
    try:
        done = subprocess.run(
            [*command, *tests],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return "timeout", f"no result within {timeout_s:g} s"
    if done.returncode == 0:
        return "passed", ""
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", done.stdout, re.MULTILINE)
    detail = failed.group(1) if failed else (done.stdout + done.stderr).strip()[-300:]
    return "failed", detail


def check_imports(root: Path) -> None:
    """The scratch copy's ``memrl`` is the one its tests import (not the editable install)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import memrl; print(memrl.__file__)"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        check=True,
    )
    where = Path(probe.stdout.strip()).resolve()
    if root.resolve() not in where.parents:
        raise RuntimeError(f"the scratch copy imports memrl from {where}, not from {root}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run these breakages")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds per test run (default: 600)"
    )
    args = parser.parse_args(argv)
    names = [b.name for b in CATALOGUE]
    if len(set(names)) != len(names):
        raise AssertionError("breakage names must be unique")
    chosen = list(CATALOGUE)
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            print(f"error: unknown breakage {unknown}. Available: {names}", file=sys.stderr)
            return 2
        chosen = [b for b in CATALOGUE if b.name in args.only]
    if args.list:
        for b in chosen:
            print(f"{b.name:<34} {b.path}: {b.behaviour}")
        return 0

    with tempfile.TemporaryDirectory(prefix="memrl-mutate-") as tmp:
        root = Path(tmp)
        scratch_copy(root)
        check_imports(root)
        suites = sorted({b.tests for b in chosen})
        for tests in suites:
            outcome, detail = run_tests(root, tests, args.timeout)
            if outcome != "passed":
                print(f"error: the unbroken tests {' '.join(tests)} do not pass: {detail}")
                return 2
        print(f"{len(chosen)} breakages; unbroken tests pass ({', '.join(map(' '.join, suites))})")
        survived = []
        for b in chosen:
            start = time.monotonic()
            correct = apply(root, b)
            try:
                outcome, detail = run_tests(root, b.tests, args.timeout)
            finally:
                (root / b.path).write_text(correct)
            verdict = "SURVIVED" if outcome == "passed" else "caught"
            if outcome == "passed":
                survived.append(b.name)
                detail = f"no test noticed: {b.behaviour}"
            seconds = time.monotonic() - start
            print(f"{verdict:<8} {b.name:<34} {seconds:5.1f}s  {detail}", flush=True)
    print(f"caught {len(chosen) - len(survived)} of {len(chosen)}; survived {len(survived)}")
    if survived:
        print(f"survivors: {', '.join(survived)}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
