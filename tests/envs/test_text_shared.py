"""The pieces every text env shares: task picking in reset and the turns-left hint."""

import numpy as np
import pytest

from memrl.envs.text import pick_task, turns_left_hint


def test_pick_task_takes_the_given_index_or_draws_one():
    rng = np.random.default_rng(0)
    assert pick_task(rng, {"task_index": 3}, 5, "split 'test'") == 3
    assert pick_task(rng, {"task_index": np.int64(4)}, 5, "split 'test'") == 4
    drawn = {pick_task(rng, None, 5, "split 'test'") for _ in range(50)}
    assert drawn == set(range(5))
    with pytest.raises(ValueError, match=r"task_index 5 is outside split 'test' \(0\.\.4\)"):
        pick_task(rng, {"task_index": 5}, 5, "split 'test'")
    with pytest.raises(TypeError, match="must be an int"):
        pick_task(rng, {"task_index": True}, 5, "split 'test'")


def test_turns_left_hint_wording():
    assert turns_left_hint(3, "Answer now.") == "[HINT]You have 3 turns left.[/HINT]"
    assert turns_left_hint(1, "Answer now.") == "[HINT]You have 1 turn left. Answer now.[/HINT]"
    assert turns_left_hint(0, "Answer now.") == "[HINT]You have no turns left.[/HINT]"
