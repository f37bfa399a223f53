"""QA tasks of the web-search env, in doc-QA's task format.

A task is ``{"task_id": str, "questions": [str, ...], "answers": [[alias, ...], ...],
"source": str}`` with one alias list per question. They come inline (a list of dicts in the env
config) or from a parquet file with those four columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TASK_COLUMNS = ("task_id", "questions", "answers", "source")


def _as_list(value: Any) -> list[Any]:
    # Parquet list columns come back as numpy arrays.
    if hasattr(value, "tolist"):
        value = value.tolist()
    return list(value)


def normalize_task(raw: dict[str, Any], index: int) -> dict[str, Any]:
    """Checks one task and brings it to the canonical form.

    Accepts ``question`` (str) for ``questions`` and, for one question, a flat alias list for
    ``answers``.
    """
    if not isinstance(raw, dict):
        raise TypeError(f"task {index} must be a dict with questions and answers, got {raw!r}")
    questions = raw.get("questions", raw.get("question"))
    if isinstance(questions, str):
        questions = [questions]
    if questions is None:
        raise ValueError(f"task {index} has no 'questions' (or 'question'): {sorted(raw)}")
    questions = [str(q) for q in _as_list(questions)]
    answers = raw.get("answers", raw.get("golden_answers"))
    if answers is None:
        raise ValueError(f"task {index} has no 'answers' (one alias list per question)")
    answers = _as_list(answers)
    if answers and all(isinstance(a, str) for a in answers):
        answers = [answers] if len(questions) == 1 else [[a] for a in answers]
    answers = [[str(alias) for alias in _as_list(aliases)] for aliases in answers]
    if len(answers) != len(questions) or not questions:
        raise ValueError(
            f"task {index} has {len(questions)} question(s) but {len(answers)} alias list(s); "
            "give one list of acceptable answers per question, e.g. [['Paris'], ['1889']]"
        )
    return {
        "task_id": str(raw.get("task_id", f"task-{index}")),
        "questions": questions,
        "answers": answers,
        "source": str(raw.get("source", "")),
    }


def load_tasks(tasks: list[dict[str, Any]] | None, task_file: str | None) -> list[dict[str, Any]]:
    """Tasks from the inline list or the parquet file (exactly one must be given)."""
    if (tasks is None) == (task_file is None):
        raise ValueError(
            "WebSearchQA needs exactly one of 'tasks' (a list of {questions, answers} dicts) "
            f"and 'task_file' (a parquet file with columns {list(TASK_COLUMNS)}); got "
            f"tasks={'set' if tasks is not None else None}, task_file={task_file!r}"
        )
    if task_file is not None:
        path = Path(task_file).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"task_file {str(path)!r} does not exist")
        import pandas as pd

        frame = pd.read_parquet(path)
        missing = {"questions", "answers"} - set(frame.columns)
        if missing:
            raise ValueError(
                f"task_file {path} lacks column(s) {sorted(missing)}; expected {list(TASK_COLUMNS)}"
            )
        tasks = frame.to_dict("records")
    assert tasks is not None
    if not tasks:
        raise ValueError("WebSearchQA got an empty task list")
    return [normalize_task(task, i) for i, task in enumerate(tasks)]
