"""The GPU-day kit: the wheels the GPU machine lacks for the GPU checks, inside its carry limit.

The lent GPU machine runs its own image (Python 3.12, its own torch, transformers, pandas...; no
Ray, no gymnasium) and reaches no package index. What a call takes there is the working tree plus
the paths it carries, 64 MiB in all. Two lists beside this file say what is where:

- ``gpu_image_packages.txt``: the distributions the image holds;
- ``gpu_kit_wheels.txt``: the wheels the kit brings (pinned), each with its size in the kit, the
  sha256 of the file downloaded, and the folders stripped from it (Ray's ``ray/jars``: Java
  support, 32 MB compressed, which nothing here uses).

Commands (run on a CPU machine with network, from any folder)::

    python scripts/gpu_kit.py build    # download, check hashes, repack, write .gpu_kit/
    python scripts/gpu_kit.py budget   # the size budget from the recorded sizes (no download)
    python scripts/gpu_kit.py build --update-manifest   # after changing a pin: record new sizes

``build`` fails (exit 1, one ``error:`` line) when the kit plus the working tree would exceed the
carry limit, or when a download does not match its recorded sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("gpu_kit")

REPO = Path(__file__).resolve().parents[1]
IMAGE_LIST = REPO / "scripts" / "gpu_image_packages.txt"
MANIFEST = REPO / "scripts" / "gpu_kit_wheels.txt"
KIT_DIR = REPO / ".gpu_kit"
CARRY_LIMIT = 64 * 2**20
"""Bytes a device call may take along: the working tree plus the carried paths."""
PYTHON_VERSION = "3.12"
"""The GPU image's interpreter (3.12.3)."""
# The image's glibc is recent (Python 3.12.3 comes with a 2.39 system); pip matches manylinux_2_N
# tags exactly, so every N up to that is offered, newest first.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Typing_Extensions``: typing-extensions)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: it is part of the repository (scripts/)")
    out = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def image_packages(path: Path = IMAGE_LIST) -> dict[str, str | None]:
    """The GPU image's distributions: normalized name -> version (None where not documented)."""
    packages: dict[str, str | None] = {}
    for line in _lines(path):
        name, _, version = line.partition("==")
        packages[normalize(name)] = version or None
    return packages


@dataclass(frozen=True)
class KitWheel:
    """One wheel of the kit, as the manifest records it."""

    name: str
    """Distribution name (normalized)."""
    version: str
    """Pinned version."""
    kit_bytes: int
    """Size of the wheel as it lies in the kit (after stripping); 0 until first recorded."""
    sha256: str
    """sha256 of the file downloaded from the index ("-" until first recorded)."""
    strip: tuple[str, ...] = ()
    """Path prefixes inside the wheel left out of the kit (e.g. ``ray/jars/``)."""

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    def line(self) -> str:
        strip = f"  strip={','.join(self.strip)}" if self.strip else ""
        return f"{self.requirement:<36} {self.kit_bytes:>10}  {self.sha256}{strip}"


def kit_wheels(path: Path = MANIFEST) -> list[KitWheel]:
    """The manifest's wheels, in its order.

    Raises:
        ValueError: a line is malformed or a name repeats (two versions of one distribution
            make ``pip install --no-deps`` of the whole kit fail).
    """
    wheels: list[KitWheel] = []
    for line in _lines(path):
        fields = line.split()
        if len(fields) not in (3, 4) or "==" not in fields[0]:
            raise ValueError(
                f"{path.name}: bad line {line!r}; expected 'name==version  kit_bytes  sha256"
                "  [strip=prefix,...]'"
            )
        name, version = fields[0].split("==", 1)
        strip: tuple[str, ...] = ()
        if len(fields) == 4:
            if not fields[3].startswith("strip="):
                raise ValueError(f"{path.name}: bad 4th field in {line!r}; expected strip=...")
            strip = tuple(p for p in fields[3][len("strip=") :].split(",") if p)
        wheels.append(KitWheel(normalize(name), version, int(fields[1]), fields[2], strip))
    names = [w.name for w in wheels]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{path.name}: {repeated} listed more than once; keep one version each")
    return wheels


def write_manifest(wheels: list[KitWheel], path: Path = MANIFEST) -> None:
    """Rewrites the manifest's entries, keeping its header comment."""
    header = []
    for raw in path.read_text().splitlines():
        if raw.startswith("#") or not raw.strip():
            header.append(raw)
        else:
            break
    path.write_text("\n".join(header + [w.line() for w in wheels]) + "\n")


def tree_files(repo: Path = REPO) -> list[Path]:
    """The files a device call sends: tracked plus untracked-not-ignored (``shared/`` too)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout.decode()
    files = {repo / p for p in out.split("\0") if p}
    shared = repo / "shared"
    if shared.is_dir():  # it travels even where git ignores it
        files.update(p for p in shared.rglob("*") if p.is_file())
    # A tracked file deleted in the work tree does not travel.
    return sorted(p for p in files if p.is_file() and not p.is_symlink())


def tree_bytes(repo: Path = REPO) -> int:
    return sum(p.stat().st_size for p in tree_files(repo))


@dataclass(frozen=True)
class Budget:
    """What one device call would carry."""

    tree_bytes: int
    """The working tree (tracked + untracked-not-ignored files)."""
    kit_bytes: int
    """The kit's wheels."""

    @property
    def total(self) -> int:
        return self.tree_bytes + self.kit_bytes

    @property
    def headroom(self) -> int:
        return CARRY_LIMIT - self.total

    def describe(self) -> str:
        mib = 2**20
        return (
            f"working tree {self.tree_bytes / mib:.1f} MiB + kit {self.kit_bytes / mib:.1f} MiB = "
            f"{self.total / mib:.1f} MiB of the {CARRY_LIMIT / mib:.0f} MiB a device call carries "
            f"({self.headroom / mib:+.1f} MiB headroom)"
        )

    def check(self) -> None:
        """Raises ValueError when the call would carry more than the limit."""
        if self.total > CARRY_LIMIT:
            raise ValueError(
                f"over the carry limit: {self.describe()}. Strip more from the largest wheel "
                "(strip= in scripts/gpu_kit_wheels.txt), drop a wheel the checks do not import, "
                "or ignore large untracked files"
            )


def recorded_budget(repo: Path = REPO) -> Budget:
    """The budget from the manifest's recorded sizes: nothing is downloaded."""
    wheels = kit_wheels()
    unrecorded = [w.requirement for w in wheels if w.kit_bytes <= 0]
    if unrecorded:
        raise ValueError(
            f"no recorded size for {unrecorded}: run `python scripts/gpu_kit.py build "
            "--update-manifest` once"
        )
    return Budget(tree_bytes(repo), sum(w.kit_bytes for w in wheels))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def repack_without(src: Path, dest: Path, prefixes: tuple[str, ...]) -> int:
    """Copies wheel ``src`` to ``dest`` leaving out the members under ``prefixes``.

    The RECORD loses the lines of the members left out, so pip installs the result as it would the
    original; every kept member keeps its name, timestamp and permission bits (Ray's binaries
    stay executable). Returns how many members were left out.

    Raises:
        ValueError: ``src`` has no RECORD, or nothing in it matches a prefix (a stale strip=).
    """
    left_out = 0
    with zipfile.ZipFile(src) as zin:
        # The wheel's own RECORD sits in its top-level .dist-info (Ray vendors packages that carry
        # RECORDs of their own deeper down).
        records = [
            n for n in zin.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")
        ]
        if len(records) != 1:
            raise ValueError(
                f"{src.name}: expected one top-level .dist-info/RECORD, found {records}"
            )
        matched = {p: False for p in prefixes}
        with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                hit = [p for p in prefixes if info.filename.startswith(p)]
                if hit:
                    matched[hit[0]] = True
                    left_out += 1
                    continue
                data = zin.read(info)
                if info.filename == records[0]:
                    data = _record_without(data, prefixes)
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    stale = [p for p, seen in matched.items() if not seen]
    if stale:
        dest.unlink()
        raise ValueError(f"{src.name}: nothing under {stale} to strip; fix strip= in the manifest")
    return left_out


def _record_without(record: bytes, prefixes: tuple[str, ...]) -> bytes:
    lines = record.decode().splitlines(keepends=True)
    # A RECORD path may be quoted (CSV) when it holds a comma; none of the stripped ones do.
    kept = [ln for ln in lines if not ln.lstrip('"').startswith(prefixes)]
    return "".join(kept).encode()


def download(wheels: list[KitWheel], dest: Path) -> dict[str, Path]:
    """Downloads the pinned cp312 manylinux (or pure) wheels into ``dest``; returns name -> file."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--dest",
        str(dest),
    ]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run(cmd + [w.requirement for w in wheels], check=True)
    found: dict[str, Path] = {}
    for path in dest.glob("*.whl"):
        found[normalize(path.name.split("-", 1)[0])] = path
    missing = [w.requirement for w in wheels if w.name not in found]
    if missing:
        raise ValueError(f"pip downloaded no wheel for {missing}")
    return found


def build(kit_dir: Path = KIT_DIR, *, update_manifest: bool = False) -> Budget:
    """Downloads and repacks the kit into ``kit_dir`` and checks the carry budget.

    Raises:
        ValueError: a download's sha256 differs from the manifest's, or the call would carry more
            than the limit.
    """
    wheels = kit_wheels()
    overlap = sorted({w.name for w in wheels} & set(image_packages()))
    if overlap:
        raise ValueError(
            f"{overlap} are in the GPU image already: a second copy on the path would shadow it; "
            "drop them from scripts/gpu_kit_wheels.txt"
        )
    recorded = []
    with tempfile.TemporaryDirectory(prefix="gpu-kit-") as tmp:
        files = download(wheels, Path(tmp) / "download")
        staged = Path(tmp) / "kit"
        staged.mkdir()
        for wheel in wheels:
            src = files[wheel.name]
            digest = sha256(src)
            if not update_manifest and digest != wheel.sha256:
                raise ValueError(
                    f"{src.name}: sha256 {digest} but the manifest records {wheel.sha256}; "
                    "if the pin changed on purpose, run with --update-manifest"
                )
            dest = staged / src.name
            if wheel.strip:
                n = repack_without(src, dest, wheel.strip)
                logger.info("%s: left out %d members under %s", src.name, n, wheel.strip)
            else:
                shutil.copyfile(src, dest)
            size = dest.stat().st_size
            if not update_manifest and size != wheel.kit_bytes:
                logger.warning(
                    "%s: %d bytes in the kit, the manifest records %d (run with "
                    "--update-manifest to record it)",
                    dest.name,
                    size,
                    wheel.kit_bytes,
                )
            recorded.append(KitWheel(wheel.name, wheel.version, size, digest, wheel.strip))
        budget = Budget(tree_bytes(), sum(w.kit_bytes for w in recorded))
        budget.check()
        # Only a complete kit within the budget replaces the old one (and nothing stale stays:
        # two versions of one wheel would make the whole install fail).
        kit_dir.mkdir(parents=True, exist_ok=True)
        for old in kit_dir.glob("*.whl"):
            old.unlink()
        for path in staged.iterdir():
            shutil.move(path, kit_dir / path.name)
    if update_manifest:
        write_manifest(recorded)
    return budget


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="download + repack the kit into .gpu_kit/, check the budget")
    p.add_argument("--kit-dir", type=Path, default=KIT_DIR)
    p.add_argument(
        "--update-manifest",
        action="store_true",
        help="record the downloaded hashes and kit sizes in scripts/gpu_kit_wheels.txt",
    )
    sub.add_parser("budget", help="check the budget from the recorded sizes (no download)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.command == "build":
            budget = build(args.kit_dir, update_manifest=args.update_manifest)
            kit = os.path.relpath(args.kit_dir, REPO)
            print(f"kit ready in {kit}/: {budget.describe()}")
        else:
            budget = recorded_budget()
            budget.check()
            print(budget.describe())
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as err:
        print(f"error: {' '.join(err.cmd[:4])} ... exited with {err.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
