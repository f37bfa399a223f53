"""When training stops: iterations, env steps or training seconds, whichever comes first."""

from __future__ import annotations

from memrl.experiment.config import parse_config
from memrl.experiment.train import _should_stop


def _row(steps: int, seconds: float) -> dict[str, float]:
    return {"env_steps_sampled": steps, "time_total_s": seconds}


def test_each_criterion_stops_on_its_own():
    exp = parse_config({"run": {"stop_iters": 0, "stop_seconds": 60}})
    assert not _should_stop(exp, 5, [_row(1000, 59.0)])
    assert _should_stop(exp, 5, [_row(1000, 60.5)])
    exp = parse_config({"run": {"stop_iters": 0, "stop_timesteps": 2000}})
    assert not _should_stop(exp, 5, [_row(1999, 1e9)])  # no time limit set
    assert _should_stop(exp, 5, [_row(2000, 1.0)])
    exp = parse_config({"run": {"stop_iters": 3}})
    assert _should_stop(exp, 3, []) and not _should_stop(exp, 2, [])
