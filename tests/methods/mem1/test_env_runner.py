"""``TextEnvRunner.sample`` on the real doc-QA env with the tiny model: GRPO groups (one task per
group, ids that never repeat across rounds, slots or runners), recorded tokens and metrics."""

from __future__ import annotations

from collections import defaultdict

import pytest

from memrl.methods.mem1.env_runner import TextEnvRunner


def _runner(config, worker_index: int) -> TextEnvRunner:
    return TextEnvRunner(config=config, worker_index=worker_index)


@pytest.mark.parametrize("train_tasks", [40, 0])
def test_groups_share_a_task_and_never_repeat_an_id(mem1_config, train_tasks):
    config = mem1_config(
        algorithm="grpo", group_size=2, rounds_per_sample=2, train_tasks=train_tasks
    )
    config.debugging(seed=7)
    runner = _runner(config, worker_index=1)
    try:
        first = runner.sample()
        second = runner.sample()
    finally:
        runner.stop()
    episodes = first + second
    # 4 envs in groups of 2, 2 rounds per sample, 2 samples: 8 groups of 2 episodes.
    assert len(first) == len(second) == 8
    groups: dict[str, list] = defaultdict(list)
    for ep in episodes:
        groups[ep.group_id].append(ep)
    assert len(groups) == 8 and all(len(members) == 2 for members in groups.values())
    for members in groups.values():
        assert len({ep.task_id for ep in members}) == 1, "a group drew different tasks"
    assert len({ep.task_id for ep in episodes}) > 1  # groups draw their own tasks
    for ep in episodes:
        assert ep.turns and all(len(t.gen_ids) == len(t.logps) for t in ep.turns)
        assert all(len(t.gen_ids) <= 4 for t in ep.turns)  # max_tokens_per_turn
    metrics = runner.get_metrics()
    assert metrics["num_episodes"].peek() == 16  # both samples (not reduced in between)


def test_two_runners_name_their_groups_apart(mem1_config):
    config = mem1_config(algorithm="grpo", group_size=2, train_tasks=40)
    ids = []
    for index in (1, 2):
        runner = _runner(config, worker_index=index)
        try:
            ids.append({ep.group_id for ep in runner.sample()})
        finally:
            runner.stop()
    assert len(ids[0]) == len(ids[1]) == 2 and not ids[0] & ids[1]
