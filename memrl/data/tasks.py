"""Compose multi-objective QA tasks (synthetic KB, FlashRAG jsonl, HotpotQA json) into parquet.

Examples:
    memrl data tasks --synthetic 100000 --objectives 2 --num-tasks 5000 --output data/tasks-syn
    memrl data tasks --flashrag nq/test.jsonl --split test --objectives 8 --output data/tasks-nq

Writes OUTPUT/train.parquet and OUTPUT/test.parquet for the synthetic KB (disjoint questions),
or OUTPUT/SPLIT.parquet for a file source (the file is that split). Every split is composed before
the first file is written, and each file replaces an old one only when complete.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--synthetic", type=int, metavar="N", help="synthetic KB of N passages")
    source.add_argument(
        "--flashrag", metavar="PATH", help="FlashRAG jsonl (question, golden_answers)"
    )
    source.add_argument(
        "--hotpotqa", metavar="PATH", help="HotpotQA json (list of question/answer)"
    )
    parser.add_argument("--objectives", type=int, default=2, help="questions per task (default 2)")
    parser.add_argument(
        "--num-tasks", type=int, default=1000, help="tasks per split (default 1000)"
    )
    parser.add_argument(
        "--split",
        default="train",
        choices=["train", "test"],
        help="split a file source provides (default train)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the KB and the shuffling")
    parser.add_argument("--source-name", default=None, help="source label (default: from the file)")
    parser.add_argument("--skip-malformed", action="store_true", help="skip malformed records")
    parser.add_argument("--output", required=True, metavar="DIR", help="tasks folder to write")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from memrl.envs.doc_qa import tasks as qa_tasks

    output = Path(args.output)
    for name in ("objectives", "num_tasks"):
        if getattr(args, name) < 1:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be >= 1, got {getattr(args, name)}.")
    if args.synthetic is not None:
        from memrl.envs.doc_qa.synthetic import SyntheticKB

        kb = SyntheticKB(args.synthetic, args.seed)
        splits = {
            split: qa_tasks.synthetic_tasks(kb, args.objectives, args.num_tasks, split, args.seed)
            for split in qa_tasks.SPLITS
        }
        for split, built in splits.items():
            path = qa_tasks.save_tasks(built, output / f"{split}.parquet")
            print(f"wrote {len(built)} {split} tasks to {path}")
        return 0
    if args.flashrag:
        items = qa_tasks.read_flashrag_jsonl(args.flashrag, args.skip_malformed)
        name = args.source_name or Path(args.flashrag).parent.name or Path(args.flashrag).stem
    else:
        items = qa_tasks.read_hotpotqa_json(args.hotpotqa, args.skip_malformed)
        name = args.source_name or "hotpotqa"
    built = qa_tasks.compose_tasks(
        items, args.objectives, name, args.split, args.seed, args.num_tasks
    )
    path = qa_tasks.save_tasks(built, output / f"{args.split}.parquet")
    print(f"wrote {len(built)} {args.split} tasks of {args.objectives} questions to {path}")
    return 0
