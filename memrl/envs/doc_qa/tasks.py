"""Multi-objective QA tasks: N questions from one source composed into one task.

A task is stored as one parquet row ``task_id, questions, answers, source`` where ``answers`` is a
list of alias lists (one per question) and each split is its own file (``train.parquet``,
``test.parquet``). Readers turn sources into single questions; ``compose_tasks`` groups them.

Sources: FlashRAG jsonl (``question``, ``golden_answers``; the form of NQ, TriviaQA, PopQA,
HotpotQA, 2Wiki, Musique and Bamboogle in FlashRAG), HotpotQA's own json (a list of objects with
``question`` and ``answer``) and the synthetic knowledge base.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

SPLITS = ("train", "test")
"""Task splits; each is a parquet file of the same name in a tasks folder."""
TASK_COLUMNS = ("task_id", "questions", "answers", "source")


@dataclass(frozen=True)
class QAItem:
    """One question with its accepted answers."""

    question: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Task:
    """N questions answered together; ``answers[i]`` are the aliases of ``questions[i]``."""

    task_id: str
    """Unique id (GRPO groups rollouts by it)."""
    questions: tuple[str, ...]
    """The questions, in answer order."""
    answers: tuple[tuple[str, ...], ...]
    """One alias list per question."""
    source: str
    """Where the questions come from (``synthetic``, ``hotpotqa``, a FlashRAG file name...)."""

    def targets(self) -> list[list[str]]:
        """Answers in the form ``score`` takes."""
        return [list(a) for a in self.answers]


def read_flashrag_jsonl(path: str | Path, skip_malformed: bool = False) -> list[QAItem]:
    """Reads FlashRAG jsonl: one ``{"question": str, "golden_answers": [str, ...]}`` per line."""
    path = _existing(path)
    items, skipped = [], 0
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                try:
                    record = json.loads(line)
                except RecursionError:
                    raise ValueError("JSON nested too deeply") from None
                items.append(_item(record.get("question"), record.get("golden_answers")))
            except (ValueError, TypeError, AttributeError) as err:
                if skip_malformed:
                    skipped += 1
                    continue
                raise ValueError(
                    f"{path}:{line_no}: malformed FlashRAG line ({err}). Expected "
                    '{"question": "...", "golden_answers": ["..."]}; fix the line or pass '
                    "skip_malformed=True (--skip-malformed)."
                ) from None
    if skipped:
        logger.warning("%s: skipped %d malformed line(s)", path, skipped)
    return items


def read_hotpotqa_json(path: str | Path, skip_malformed: bool = False) -> list[QAItem]:
    """Reads HotpotQA's json: a list of objects with ``question`` and ``answer``."""
    path = _existing(path)
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as err:
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise ValueError(
            f"{path}: not valid JSON ({reason}); HotpotQA files are one JSON list."
        ) from None
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of questions, got {type(records).__name__}")
    items, skipped = [], 0
    for i, record in enumerate(records):
        try:
            items.append(_item(record.get("question"), [record.get("answer")]))
        except (ValueError, TypeError, AttributeError) as err:
            if skip_malformed:
                skipped += 1
                continue
            raise ValueError(
                f"{path}: entry {i} is malformed ({err}); expected "
                '{"question": "...", "answer": "..."}. Fix it or pass skip_malformed=True.'
            ) from None
    if skipped:
        logger.warning("%s: skipped %d malformed entries", path, skipped)
    return items


def _item(question: object, answers: object) -> QAItem:
    if not isinstance(question, str) or not question.strip():
        raise TypeError(f"'question' must be a non-empty string, got {question!r}")
    if not isinstance(answers, list) or not answers:
        raise TypeError(f"answers must be a non-empty list of strings, got {answers!r}")
    if not all(isinstance(a, str) for a in answers):
        raise TypeError(f"answers must be strings, got {answers!r}")
    if any(";" in a for a in answers) or ";" in question:
        # ';' separates the answers of a multi-objective task; it cannot appear inside one.
        answers = [a.replace(";", ",") for a in answers]
        question = question.replace(";", ",")
    return QAItem(question.strip(), tuple(answers))


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"QA file {str(path)!r} does not exist; pass an existing file.")
    return path


def compose_tasks(
    items: list[QAItem],
    objectives: int,
    source: str,
    split: str,
    seed: int = 0,
    num_tasks: int | None = None,
) -> list[Task]:
    """Groups questions of one source into tasks of ``objectives`` distinct questions each.

    Questions are shuffled with ``seed`` and dealt out without reuse, so ``len(items) //
    objectives`` tasks at most; ``num_tasks`` caps the number.
    """
    if objectives < 1:
        raise ValueError(f"objectives must be >= 1, got {objectives}")
    order = np.random.default_rng(seed).permutation(len(items))
    available = len(items) // objectives
    count = available if num_tasks is None else min(num_tasks, available)
    if count == 0:
        raise ValueError(
            f"{len(items)} questions cannot fill one task of {objectives} objectives; "
            "use fewer objectives or more questions."
        )
    tasks = []
    for t in range(count):
        chosen = [items[int(i)] for i in order[t * objectives : (t + 1) * objectives]]
        tasks.append(
            Task(
                task_id=f"{source}-{split}-{t:06d}",
                questions=tuple(q.question for q in chosen),
                answers=tuple(q.answers for q in chosen),
                source=source,
            )
        )
    return tasks


REDRAWS = ("none", "facts", "world")
"""What a synthetic task redraws for itself: nothing (all tasks share the KB), its ``facts`` (same
names and wording, new values) or its whole ``world`` (new names and facts, same templates)."""


def task_world_seed(split: str, index: int) -> int:
    """The seed of task ``index`` of ``split``'s own world or facts (never shared between tasks or
    splits)."""
    return (SPLITS.index(split) << 32) | index


def task_kb(kb, redraw: str, split: str, index: int):
    """The KB task ``index`` of ``split`` is asked about and searches: ``kb`` itself, ``kb`` with
    its facts redrawn, or a new world of ``kb``'s size and passage length."""
    if redraw == "none":
        return kb
    seed = task_world_seed(split, index)
    if redraw == "facts":
        return kb.with_facts(seed)
    if redraw == "world":
        return type(kb)(kb.num_passages, _world_seed(kb.seed, seed), kb.passage_words)
    raise ValueError(f"redraw must be one of {list(REDRAWS)}, got {redraw!r}")


def _world_seed(base: int, seed: int) -> int:
    # A 63-bit seed mixed from the base world's seed and the task's, so worlds of different base
    # seeds (and the base worlds themselves, seeds 0, 1, ...) do not coincide.
    return int(np.random.SeedSequence([base, 7, seed]).generate_state(2, np.uint64)[0] >> 1)


def synthetic_tasks(
    kb,
    objectives: int,
    num_tasks: int,
    split: str = "train",
    seed: int = 0,
    test_fraction: float = 0.2,
    multi_hop_fraction: float = 0.5,
    redraw: str = "none",
) -> list[Task]:
    """Tasks over a ``SyntheticKB``; task ``i`` depends only on (kb, split, seed, i).

    With ``redraw`` other than ``none``, task ``i`` asks about its own KB (``task_kb``), which the
    env then searches: answers can only be read from that task's passages.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    if redraw not in REDRAWS:
        raise ValueError(f"redraw must be one of {list(REDRAWS)}, got {redraw!r}")
    tasks = []
    marker = {"none": "", "facts": "f", "world": "w"}[redraw]
    for t in range(num_tasks):
        rng = np.random.default_rng([seed, SPLITS.index(split), t])
        world = task_kb(kb, redraw, split, t)
        qs = world.sample_questions(objectives, rng, split, test_fraction, multi_hop_fraction)
        tasks.append(
            Task(
                task_id=f"synthetic{kb.num_passages}-s{kb.seed}-{split}-{marker}{t:06d}",
                questions=tuple(q.question for q in qs),
                answers=tuple(q.answers for q in qs),
                source="synthetic",
            )
        )
    return tasks


def save_tasks(tasks: list[Task], path: str | Path) -> Path:
    """Writes tasks as parquet (``task_id, questions, answers, source``), replacing ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from memrl.envs.files import replacing

    path = Path(path)
    table = pa.table(
        {
            "task_id": [t.task_id for t in tasks],
            "questions": [list(t.questions) for t in tasks],
            "answers": [[list(a) for a in t.answers] for t in tasks],
            "source": [t.source for t in tasks],
        },
        schema=pa.schema(
            [
                ("task_id", pa.string()),
                ("questions", pa.list_(pa.string())),
                ("answers", pa.list_(pa.list_(pa.string()))),
                ("source", pa.string()),
            ]
        ),
    )
    with replacing(path) as (partial,):
        pq.write_table(table, partial)
    return path


def load_tasks(path: str | Path, split: str | None = None) -> list[Task]:
    """Reads tasks from a parquet file, or ``SPLIT.parquet`` inside a folder."""
    import pyarrow.parquet as pq

    path = Path(path)
    if path.is_dir():
        if split is None:
            raise ValueError(f"{path} is a tasks folder: say which split to read ({list(SPLITS)}).")
        path = path / f"{split}.parquet"
    if not path.is_file():
        raise FileNotFoundError(
            f"Tasks file {str(path)!r} does not exist. Build tasks with `memrl data tasks`."
        )
    table = pq.read_table(path)
    missing = [c for c in TASK_COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(
            f"{path}: a tasks file needs columns {list(TASK_COLUMNS)}; missing {missing}"
        )
    tasks = []
    for row in table.select(list(TASK_COLUMNS)).to_pylist():
        if len(row["questions"]) != len(row["answers"]):
            raise ValueError(
                f"{path}: task {row['task_id']} has {len(row['questions'])} questions but "
                f"{len(row['answers'])} answer lists; each question needs one alias list."
            )
        tasks.append(
            Task(
                task_id=row["task_id"],
                questions=tuple(row["questions"]),
                answers=tuple(tuple(a) for a in row["answers"]),
                source=row["source"],
            )
        )
    return tasks
