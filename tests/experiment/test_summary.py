"""The training summary's memory line: later inner episodes against the first one."""

from __future__ import annotations

import math

from memrl.experiment.train import memory_line


def _rows(first: float, later: float, n: int = 20) -> list[dict[str, float]]:
    early = [{"inner_return_0": 1.0, "inner_return_1": 1.0, "inner_return_2": 1.0}] * (n - 3)
    recent = [{"inner_return_0": first, "inner_return_1": later, "inner_return_2": later}] * 3
    return early + recent


def test_memory_line_reads_the_last_iterations():
    line = memory_line(_rows(1.0, 1.5))
    assert "(1-2) return 1.50 on average against 1.00" in line and "+50%" in line
    assert "does better once it has seen the layout" in line


def test_memory_line_says_when_there_is_no_sign_of_memory():
    line = memory_line(_rows(1.0, 1.03))
    assert "no clear sign of memory use" in line


def test_memory_line_is_absent_without_inner_episodes():
    assert memory_line([{"episode_return_mean": 1.0}] * 5) is None
    assert memory_line([{"inner_return_0": math.nan, "inner_return_1": 1.0}] * 5) is None
