"""``scripts/paired_eval.py``: the paired comparison of two MEM1 evaluations, task by task."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("paired_eval", REPO / "scripts" / "paired_eval.py")
paired_eval = importlib.util.module_from_spec(spec)
spec.loader.exec_module(paired_eval)


def _write(path: Path, em: list[float], tasks: list[int] | None = None) -> str:
    tasks = list(range(len(em))) if tasks is None else tasks
    path.write_text(json.dumps({"per_task": {"task_index": tasks, "em": em}}))
    return str(path)


def test_the_paired_difference_and_its_standard_error(tmp_path, capsys):
    base = [0.0, 0.5, 1.0, 0.5]
    new = [0.5, 0.5, 1.0, 1.0]
    r = paired_eval.compare(base, new)
    # differences 0.5, 0, 0, 0.5: mean 0.25, sample std 0.2887, SE 0.1443
    assert r["diff"] == pytest.approx(0.25)
    assert r["diff_se"] == pytest.approx(math.sqrt(1 / 12) / 2)
    assert r["z"] == pytest.approx(0.25 / (math.sqrt(1 / 12) / 2))
    assert r["base"] == pytest.approx(0.5) and r["new"] == pytest.approx(0.75)
    # the shared per-task variance cancels: the paired SE is below either side's SE
    assert r["diff_se"] < r["base_se"]

    paired_eval.main([_write(tmp_path / "a.json", base), _write(tmp_path / "b.json", new)])
    out = capsys.readouterr().out
    assert "em over 4 tasks" in out and "new - base +0.250" in out


def test_files_over_different_tasks_or_without_per_task_figures_are_refused(tmp_path):
    a = _write(tmp_path / "a.json", [0.0, 1.0])
    b = _write(tmp_path / "b.json", [0.0, 1.0, 1.0])
    with pytest.raises(SystemExit, match="different tasks"):
        paired_eval.main([a, b])
    (tmp_path / "c.json").write_text(json.dumps({"returns": [1.0]}))
    with pytest.raises(SystemExit, match="no per_task"):
        paired_eval.main([a, str(tmp_path / "c.json")])
    with pytest.raises(SystemExit, match="no per-task 'f1'"):
        paired_eval.main([a, a, "--metric", "f1"])
