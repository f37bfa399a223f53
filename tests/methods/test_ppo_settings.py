"""PPO settings of the embodied methods: numbers or RLlib schedules for lr and entropy_coeff."""

from __future__ import annotations

import pytest

from memrl.experiment.config import parse_config


def test_schedules_reach_rllib_as_given():
    exp = parse_config(
        {
            "algorithm": {
                "name": "ppo",
                "lr": [[0, 5.0e-4], [1.0e6, 1.0e-4]],
                "entropy_coeff": [[0, 0.01], [2.0e6, 0.0]],
            }
        }
    )
    algo = exp.algorithm.make_algorithm_config(exp)
    assert algo.lr == [[0, 5.0e-4], [1.0e6, 1.0e-4]]
    assert algo.entropy_coeff == [[0, 0.01], [2.0e6, 0.0]]
    assert parse_config({"algorithm": {"name": "ppo", "lr": 1e-3}}).algorithm.lr == 1e-3


@pytest.mark.parametrize(
    "bad",
    [[[5, 1e-3], [10, 1e-4]], [[0, 1e-3]], [[0, 1e-3], [0, 1e-4]], [[0, 1e-3], [10, -1.0]], -1.0],
    ids=["late-start", "one-point", "steps-not-rising", "negative-value", "negative-number"],
)
def test_bad_lr_schedules_name_the_format(bad):
    with pytest.raises(ValueError, match=r"algorithm\.lr must be a number > 0 or a schedule"):
        parse_config({"algorithm": {"name": "ppo", "lr": bad}})
