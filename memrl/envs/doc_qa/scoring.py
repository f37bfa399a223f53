"""Scoring of multi-objective QA answers: summed exact match and summed SQuAD token F1.

One function, ``score``, is used by the env (training reward), evaluation and the benchmarks, so
the numbers they report cannot disagree. Normalization follows the SQuAD v1.1 evaluation script:
lowercase, punctuation removed, the articles a/an/the removed, whitespace collapsed.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

ANSWER_SEPARATOR = ";"
"""Separates the answers of the N questions inside one answer block."""

_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, drop punctuation and articles, collapse whitespace."""
    text = text.lower()
    text = text.translate(_DROP_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, aliases: Sequence[str]) -> float:
    """1.0 when the normalized prediction equals any normalized alias, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(alias) for alias in aliases))


def token_f1(prediction: str, aliases: Sequence[str]) -> float:
    """SQuAD token F1 (bag of tokens), the max over aliases.

    When either side normalizes to no tokens, F1 is 1.0 if both do and 0.0 otherwise (as SQuAD 2.0
    does), so that exact match never exceeds F1.
    """
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for alias in aliases:
        gold_tokens = normalize_answer(alias).split()
        if not pred_tokens or not gold_tokens:
            best = max(best, float(pred_tokens == gold_tokens))
            continue
        common = Counter(pred_tokens) & Counter(gold_tokens)
        num_same = sum(common.values())
        if num_same == 0:
            continue
        precision = num_same / len(pred_tokens)
        recall = num_same / len(gold_tokens)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def split_answers(prediction: str) -> list[str]:
    """Splits an answer block into its parts (one per question), stripped."""
    return [part.strip() for part in prediction.split(ANSWER_SEPARATOR)]


def score(prediction: str, targets: Sequence[Sequence[str]]) -> dict[str, float]:
    """Scores a ';'-separated prediction against one alias list per question.

    Part i of the prediction is scored against ``targets[i]`` (max over its aliases). A prediction
    whose number of parts differs from ``len(targets)`` scores 0 and 0.

    Args:
        prediction: the answer text, e.g. ``"Paris; 1889"``.
        targets: one list of acceptable aliases per question, e.g. ``[["Paris"], ["1889"]]``.

    Returns:
        ``{"em": summed exact match, "f1": summed token F1}``, each in ``[0, len(targets)]``.

    Raises:
        TypeError: ``prediction`` is not a string or ``targets`` is not a list of alias lists.
    """
    if not isinstance(prediction, str):
        raise TypeError(
            f"score() expects the prediction as a str, got {type(prediction).__name__}: "
            "pass the text inside the answer tag."
        )
    if isinstance(targets, str) or any(isinstance(t, str) for t in targets):
        raise TypeError(
            f"score() expects targets as a list of alias lists (e.g. [['Paris'], ['1889']]), "
            f"got {targets!r}: wrap each question's answer in a list."
        )
    parts = split_answers(prediction)
    if len(parts) != len(targets):
        return {"em": 0.0, "f1": 0.0}
    em = sum(question_matches(prediction, targets))
    f1 = sum(token_f1(part, aliases) for part, aliases in zip(parts, targets, strict=True))
    return {"em": float(em), "f1": float(f1)}


def question_matches(prediction: str, targets: Sequence[Sequence[str]]) -> list[float]:
    """Exact match of each question's part (1.0 or 0.0, one per question, in order); all 0.0
    when the prediction's number of parts differs from ``len(targets)``. ``score``'s EM is their
    sum."""
    parts = split_answers(prediction)
    if len(parts) != len(targets):
        return [0.0] * len(targets)
    return [exact_match(part, aliases) for part, aliases in zip(parts, targets, strict=True)]


def repeats_one_value(prediction: str) -> bool:
    """Whether an answer of two or more parts gives one (normalized) value for every part, as in
    ``"1931; 1931"``: a guess that can be right for at most one question."""
    parts = [normalize_answer(part) for part in split_answers(prediction)]
    return len(parts) >= 2 and len(set(parts)) == 1


def values_in_text(values: Sequence[str], text: str) -> list[bool]:
    """For each value, whether its normalized form occurs in the normalized ``text`` as whole
    words (``"1931"`` is in ``"founded in 1931."``, not in ``"19310"``)."""
    words = f" {normalize_answer(text)} "
    found = []
    for value in values:
        norm = normalize_answer(value)
        found.append(bool(norm) and f" {norm} " in words)
    return found
