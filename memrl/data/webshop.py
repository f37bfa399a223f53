"""Write a synthetic WebShop catalogue in the original files' schema (items_*.json).

The files follow the original WebShop schema exactly, so every consumer of the real files (and
``memrl/WebShop-v0`` with ``data_dir=DIR``) reads them. The same ``--seed`` gives the same bytes.
The counts are checked before anything is written, and the three files replace those already in
the folder only once all three are complete.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--products",
        type=int,
        default=1000,
        help="catalogue size, 100 to 1000000 (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default: 0)")
    parser.add_argument(
        "--instructions",
        type=int,
        default=None,
        help="human-style instructions to write, at most 10 per product "
        "(default: min(12087, 2*products))",
    )
    parser.add_argument(
        "--output",
        default="data/webshop",
        help="directory to write the three files into (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    import time

    from memrl.envs.webshop.generator import generate_catalogue

    start = time.perf_counter()
    paths = generate_catalogue(args.output, args.products, args.seed, args.instructions)
    elapsed = time.perf_counter() - start
    for key, path in paths.items():
        print(f"{key:>10}: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    print(f"wrote {args.products} products in {elapsed:.1f} s; use data_dir={args.output!r}")
    return 0
