"""The training summary's memory line: later inner episodes against the first one, or success
against the best an agent without memory can do."""

from __future__ import annotations

import math

from memrl.envs import memoryless_success
from memrl.experiment.memory_verdict import gain_is_clear, memory_line, success_line


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


def _success_rows(recent: float, n: int = 30) -> list[dict[str, float]]:
    return [{"inner_return_0": 0.0, "inner_success_rate": 0.5}] * (n - 3) + [
        {"inner_return_0": 0.9, "inner_success_rate": recent}
    ] * 3


def test_success_line_sets_the_corridor_against_its_coin_flip():
    assert memoryless_success("memrl/MemoryCorridor-v0") == 0.5
    line = success_line(_success_rows(0.96), "memrl/MemoryCorridor-v0")
    assert "success 96.0% over the last 3 iterations, against 50% at best" in line
    assert "recalls what it saw" in line
    line = success_line(_success_rows(0.70), "memrl/MemoryCorridor-v0")
    assert "no clear sign of memory use" in line


def test_success_line_is_absent_where_the_env_states_no_bound():
    assert memoryless_success("memrl/DarkKeyToDoor-v0") is None
    assert memoryless_success("CartPole-v1") is None
    assert success_line(_success_rows(0.96), "memrl/DarkKeyToDoor-v0") is None
    rows = [{"inner_return_0": 1.0}] * 5
    assert success_line(rows, "memrl/MemoryCorridor-v0") is None


def _spread_rows(first: float, later: float, var: float) -> list[dict[str, float]]:
    row = {"num_episodes": 40.0, "inner_return_0": first, "inner_return_sq_0": first**2 + var}
    for k in (1, 2):
        row |= {f"inner_return_{k}": later, f"inner_return_sq_{k}": later**2 + var}
    return [row] * 20


def test_memory_line_tells_a_gain_from_noise():
    # 100 trials in the window; noise = 2 * sqrt((var + var) / 100).
    clear = memory_line(_spread_rows(1.0, 1.5, 0.25))
    assert "(+0.50, noise +-0.14 over the last 3 iterations)" in clear
    assert "does better once it has seen the layout" in clear
    noisy = memory_line(_spread_rows(1.0, 1.5, 4.0))
    assert "(+0.50, noise +-0.57" in noisy and "no clear sign of memory use" in noisy
    # A negative first return: the absolute gain decides, not a percentage of it.
    assert "does better" in memory_line(_spread_rows(-1.0, -0.5, 0.25))
    # Few trials: the window holds what was seen, so the same gain is noise.
    few = [dict(r, num_episodes=0.25) for r in _spread_rows(1.0, 1.5, 0.25)]
    assert "noise +-0.63" in memory_line(few) and "no clear sign" in memory_line(few)


def test_gain_without_a_spread_needs_the_blind_floor():
    # No mean squares logged: a quarter of the first's size (and 0.25) must be gained.
    assert gain_is_clear(1.0, 1.3, None) and not gain_is_clear(1.0, 1.2, None)
    assert gain_is_clear(-2.0, -1.4, None) and not gain_is_clear(-2.0, -1.6, None)
    # A first inner episode at zero: the absolute floor decides; a loss is never a gain.
    assert gain_is_clear(0.0, 0.3, None) and not gain_is_clear(0.0, -0.5, None)
    assert not gain_is_clear(0.4, 0.6, None)  # 50% of a small first return, but under 0.25
    assert "no clear sign" in memory_line(_rows(0.0, -0.5))
    # With a spread: above the noise and at least a tenth of the first.
    assert gain_is_clear(1.0, 1.2, 0.1) and not gain_is_clear(1.0, 1.2, 0.25)
    assert not gain_is_clear(10.0, 10.5, 0.1)
