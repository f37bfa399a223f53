"""Turn a QA file (HotpotQA, NQ or FlashRAG JSONL) and a passage file into doc-QA tasks + an index.

Examples:
    memrl data qa --questions hotpot_train.jsonl --passages wiki18.jsonl --objectives 2 \
        --split train --output data/hotpot2
    memrl data qa --questions nq_test.jsonl --passages data/hotpot2/corpus.parquet \
        --objectives 8 --split test --output data/nq8

Each line of ``--questions`` is one question with its answers in any of the usual forms:
FlashRAG's ``golden_answers`` list, NQ-open's ``answer`` list, HotpotQA's ``answer`` string (or
``answers``); a file holding one JSON list (HotpotQA's own release) is read too. Questions are
dealt without reuse into tasks of ``--objectives`` questions. ``--passages`` is a corpus file
(Wikipedia-2018 ``{"id", "contents"}`` JSONL, ``{"id", "title", "text"}`` JSONL, or parquet).

Writes ``OUTPUT/SPLIT.parquet`` (tasks), ``OUTPUT/corpus.parquet`` and ``OUTPUT/index/`` (BM25
by default); the env then reads ``{tasks: OUTPUT, index: OUTPUT/index, split: SPLIT}``, printed
at the end. Several splits can share one folder (run once per split; the corpus and index are
rebuilt only when ``--passages`` changes or ``--rebuild-index`` is given).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ANSWER_KEYS = ("golden_answers", "answers", "answer")
"""Where a record's answers may be, in order of preference."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--questions", required=True, metavar="PATH", help="QA JSONL (or JSON)")
    parser.add_argument("--passages", required=True, metavar="PATH", help="corpus file")
    parser.add_argument("--objectives", type=int, default=2, help="questions per task (default 2)")
    parser.add_argument("--split", default="train", choices=["train", "test"])
    parser.add_argument("--num-tasks", type=int, default=None, help="most tasks (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the question shuffling")
    parser.add_argument("--source-name", default=None, help="source label (default: file stem)")
    parser.add_argument("--kind", default="bm25", choices=["bm25", "dense"], help="index kind")
    parser.add_argument("--rebuild-index", action="store_true", help="rebuild an existing index")
    parser.add_argument("--skip-malformed", action="store_true", help="skip malformed records")
    parser.add_argument("--output", required=True, metavar="DIR", help="folder to write")


def read_questions(path: str | Path, skip_malformed: bool = False) -> list[Any]:
    """QA items of a JSONL file (one record per line) or of a file holding one JSON list.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a malformed record (its line or entry number), unless ``skip_malformed``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"questions file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            records = list(enumerate(json.loads(text), start=1))
        except (ValueError, RecursionError) as err:
            reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
            raise ValueError(
                f"{path}: not a valid JSON list of questions ({reason}); give JSONL (one "
                "question per line) or one JSON list of flat records."
            ) from None
        where = "entry"
    else:
        records = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        where = "line"
    items = []
    for number, record in records:
        try:
            try:
                record = json.loads(record) if isinstance(record, str) else record
            except RecursionError:
                raise ValueError("JSON nested too deeply") from None
            items.append(_item(record))
        except (TypeError, ValueError) as err:
            if skip_malformed:
                continue
            raise ValueError(
                f'{path} {where} {number}: {err}; expected {{"question": "...", '
                '"answer": "..."} (or "answers"/"golden_answers" lists). Fix it or pass '
                "--skip-malformed."
            ) from None
    return items


def _item(record: Any) -> Any:
    from memrl.envs.doc_qa.tasks import QAItem

    if not isinstance(record, dict):
        raise TypeError(f"a record must be a JSON object, got {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise TypeError(f"'question' must be a non-empty string, got {question!r}")
    key = next((k for k in ANSWER_KEYS if k in record), None)
    answers = record.get(key) if key else None
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise TypeError(f"answers must be a string or a non-empty list of strings, got {answers!r}")
    # ';' separates the answers of a multi-question task; it cannot appear inside one.
    return QAItem(question.strip().replace(";", ","), tuple(a.replace(";", ",") for a in answers))


def run(args: argparse.Namespace) -> int:
    import time

    from memrl.envs.doc_qa.tasks import compose_tasks, save_tasks
    from memrl.envs.retrieval.bm25 import read_index_meta
    from memrl.envs.retrieval.corpus import load_corpus, save_corpus
    from memrl.envs.retrieval.local import build_index

    start = time.perf_counter()
    output = Path(args.output)
    items = read_questions(args.questions, args.skip_malformed)
    source = args.source_name or Path(args.questions).stem
    tasks = compose_tasks(items, args.objectives, source, args.split, args.seed, args.num_tasks)
    tasks_path = save_tasks(tasks, output / f"{args.split}.parquet")
    print(f"wrote {len(tasks)} {args.split} tasks of {args.objectives} questions to {tasks_path}")

    corpus_path = output / "corpus.parquet"
    index_path = output / "index"
    passages = str(Path(args.passages).resolve())
    built_from = None
    if (index_path / "memrl_index.json").is_file():
        built_from = read_index_meta(index_path).get("passages")
    if args.rebuild_index or built_from != passages:
        corpus, _ = load_corpus(args.passages)
        save_corpus(corpus, corpus_path)
        index = build_index(corpus, args.kind, show_progress=False)
        index.save(
            index_path,
            extra_meta={"corpus": str(corpus_path.resolve()), "passages": passages},
        )
        print(f"{args.kind} index over {len(corpus)} passages -> {index_path}")
    else:
        print(f"reusing the index in {index_path} (built from {passages})")
    print(
        f"done in {time.perf_counter() - start:.1f}s; env config:\n"
        f"  env: {{id: memrl/DocQA-v0, config: {{tasks: {output}, index: {index_path}, "
        f"split: {args.split}}}}}"
    )
    return 0
