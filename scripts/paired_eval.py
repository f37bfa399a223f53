"""Compares two `memrl eval` results of MEM1 task by task (the same held-out tasks, in order).

    python scripts/paired_eval.py BASE.json NEW.json [--metric em]

Prints each side's mean with its standard error, the mean paired difference NEW - BASE, the
standard error of that difference (from the per-task differences, so the variance two models
share on hard and easy tasks cancels) and how many standard errors it is from 0. Both files need
``per_task`` (written by `memrl eval` of a MEM1 run or config) over the same task indices.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def load(path: str, metric: str) -> tuple[list[float], list[float]]:
    data = json.loads(Path(path).read_text())
    per_task = data.get("per_task")
    if not per_task:
        raise SystemExit(f"error: {path} has no per_task figures: evaluate with `memrl eval`")
    if metric not in per_task:
        raise SystemExit(f"error: {path} has no per-task {metric!r}; it has {sorted(per_task)}")
    return per_task["task_index"], per_task[metric]


def mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def compare(base: list[float], new: list[float]) -> dict[str, float]:
    diffs = [b - a for a, b in zip(base, new, strict=True)]
    (m_base, se_base), (m_new, se_new) = mean_se(base), mean_se(new)
    m_diff, se_diff = mean_se(diffs)
    z = m_diff / se_diff if se_diff > 0 else float("inf") if m_diff else 0.0
    return {
        "tasks": len(diffs),
        "base": m_base,
        "base_se": se_base,
        "new": m_new,
        "new_se": se_new,
        "diff": m_diff,
        "diff_se": se_diff,
        "z": z,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base")
    parser.add_argument("new")
    parser.add_argument("--metric", default="em", help="a per-task figure: em, f1, reward, ...")
    args = parser.parse_args(argv)
    idx_a, base = load(args.base, args.metric)
    idx_b, new = load(args.new, args.metric)
    if idx_a != idx_b:
        raise SystemExit(
            f"error: the files cover different tasks ({len(idx_a)} vs {len(idx_b)} episodes, "
            "or another order): evaluate both with the same --episodes"
        )
    r = compare(base, new)
    print(
        f"{args.metric} over {r['tasks']} tasks: base {r['base']:.3f} +- {r['base_se']:.3f}, "
        f"new {r['new']:.3f} +- {r['new_se']:.3f}; new - base {r['diff']:+.3f} "
        f"+- {r['diff_se']:.3f} (paired SE), {r['z']:+.1f} SE"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
