"""Build a passage corpus (synthetic KB, or Wikipedia-2018/plain jsonl, parquet) as parquet.

Examples:
    memrl data corpus --synthetic 100000 --output data/synthetic100k.parquet
    memrl data corpus --input wiki-18.jsonl --format wiki-jsonl --output data/wiki18.parquet

The corpus is read and converted in full before the output is written, and the output replaces
an existing file only when complete.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--synthetic", type=int, metavar="N", help="synthetic KB of N passages")
    source.add_argument("--input", metavar="PATH", help="a corpus file to convert")
    parser.add_argument("--seed", type=int, default=0, help="synthetic KB seed (default 0)")
    parser.add_argument(
        "--format",
        default="auto",
        choices=["auto", "parquet", "wiki-jsonl", "jsonl"],
        help="format of --input (default: by suffix and first line)",
    )
    parser.add_argument(
        "--skip-malformed",
        action="store_true",
        help="skip and count malformed lines instead of stopping at the first",
    )
    parser.add_argument("--output", required=True, metavar="PATH", help="parquet file to write")


def run(args: argparse.Namespace) -> int:
    import time

    from memrl.envs.retrieval.corpus import load_corpus, save_corpus

    start = time.perf_counter()
    skipped = 0
    if args.synthetic is not None:
        from memrl.envs.doc_qa.synthetic import SyntheticKB

        corpus = SyntheticKB(args.synthetic, args.seed).corpus
    else:
        corpus, skipped = load_corpus(args.input, args.format, args.skip_malformed)
    path = save_corpus(corpus, args.output)
    note = f" ({skipped} malformed line(s) skipped)" if skipped else ""
    print(f"wrote {len(corpus)} passages to {path} in {time.perf_counter() - start:.1f}s{note}")
    return 0
