"""A Python environment here that holds only what the GPU machine will: its image plus the kit.

The GPU checks cannot be tried on the GPU machine before the day it is lent, so they are tried
here first in an environment that mimics its packages: a fresh venv (no site-packages of its own)
whose site-packages is a view, made of symbolic links, onto the installed distributions of the
interpreter that runs this script, restricted to

- the distributions of ``gpu_image_packages.txt`` (the list is the whole image: a distribution not
  in it is not there);
- the distributions of the kit (``gpu_kit_wheels.txt``), without their requirements: a requirement
  the kit forgot is then missing here exactly as it would be there;
- ``DRIFT``: the few distributions that this machine's newer versions of image distributions
  require and the image's own versions do not.

Ray's worker processes run the same interpreter (``sys.executable``), so they see the same view.
Versions are this machine's, not the image's, and the interpreter is this machine's (3.11): the
environment checks which modules can be imported, not which versions behave how.

    python scripts/gpu_image_env.py /tmp/gpu-image        # then /tmp/gpu-image/bin/python ...
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import sys
import sysconfig
import venv
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_kit  # noqa: E402  (a sibling script, not a package)

DRIFT = {
    # huggingface_hub 2.x (here) moved from httpx to its fork httpx2; the image's 1.33 uses httpx.
    "httpx2",
    "httpcore2",
    "truststore",
    # python-dateutil 4 (here) requires tzdata; the image lists no tzdata, so its version does not.
    "tzdata",
}
"""Distributions admitted although the image lists none of that name (see the comments)."""


@dataclass
class ImageEnv:
    """What ``build`` made."""

    python: Path
    """The environment's interpreter."""
    image: set[str] = field(default_factory=set)
    """Image distributions found installed here."""
    image_missing: set[str] = field(default_factory=set)
    """Image distributions not installed here (left out of the view)."""
    unmet: dict[str, list[str]] = field(default_factory=dict)
    """Requirements of image distributions (here) that are neither listed nor in DRIFT:
    requirement -> the image distributions that require it."""
    kit: set[str] = field(default_factory=set)
    """Kit distributions found installed here."""
    kit_missing: set[str] = field(default_factory=set)
    """Kit distributions not installed here."""


def _requirements(dist: md.Distribution) -> list[str]:
    """Names of what ``dist`` requires without extras, under this interpreter."""
    from packaging.requirements import Requirement

    names = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(gpu_kit.normalize(req.name))
    return names


def build(dest: Path, site: Path | None = None, exclude: set[str] = frozenset()) -> ImageEnv:
    """Creates the environment at ``dest`` (which must not exist) from the distributions in
    ``site`` (default: this interpreter's site-packages), leaving out those named in
    ``exclude`` (e.g. ``{"ray"}``: the machine without the kit's Ray)."""
    site = Path(site or sysconfig.get_paths()["purelib"])
    if dest.exists():
        raise FileExistsError(f"{dest} exists; give a new path")
    dists = {gpu_kit.normalize(d.metadata["Name"]): d for d in md.distributions(path=[str(site)])}
    env = ImageEnv(python=dest / "bin" / "python")
    image = set(gpu_kit.image_packages())
    kit = {w.name for w in gpu_kit.kit_wheels()}
    env.image, env.image_missing = image & set(dists), image - set(dists)
    env.kit, env.kit_missing = kit & set(dists), kit - set(dists)
    allowed = (env.image | env.kit | (DRIFT & set(dists))) - {gpu_kit.normalize(n) for n in exclude}
    for name in sorted(env.image):
        for req in _requirements(dists[name]):
            if req not in allowed and req not in image:
                env.unmet.setdefault(req, []).append(name)

    owners: dict[tuple[str, ...], set[str]] = defaultdict(set)
    files: dict[str, list[tuple[str, ...]]] = {}
    for name, dist in dists.items():
        parts = [
            p.parts
            for p in dist.files or []
            if p.parts and p.parts[0] != ".." and "__pycache__" not in p.parts
        ]
        files[name] = parts
        for path in parts:
            for depth in range(1, len(path) + 1):
                owners[path[:depth]].add(name)
    # Link each allowed distribution's files at the shallowest folder that no other, disallowed,
    # distribution shares (namespace folders such as google/ are shared by several).
    links: set[tuple[str, ...]] = set()
    for name in allowed:
        for path in files[name]:
            for depth in range(1, len(path) + 1):
                if owners[path[:depth]] <= allowed:
                    links.add(path[:depth])
                    break
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=False).create(dest)
    target = Path(sysconfig.get_path("purelib", vars={"base": str(dest), "platbase": str(dest)}))
    for path in sorted(links, key=len):
        src = site.joinpath(*path)
        # Under a linked folder a link would land in the real site-packages: never go there.
        if not src.exists() or any(path[:d] in links for d in range(1, len(path))):
            continue
        link = target.joinpath(*path)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(src, target_is_directory=src.is_dir())
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="a new folder for the environment")
    parser.add_argument(
        "--exclude", default="", help="comma-separated distributions to leave out (e.g. ray)"
    )
    args = parser.parse_args(argv)
    env = build(args.dest, exclude={n for n in args.exclude.split(",") if n})
    print(f"python: {env.python}")
    print(f"image distributions not installed here: {sorted(env.image_missing)}")
    print(f"required by image distributions here, not admitted: {env.unmet}")
    print(f"kit distributions not installed here: {sorted(env.kit_missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
