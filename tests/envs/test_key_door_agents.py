"""Scripted Dark-Key-To-Door references: memory is worth what the docs say it is."""

from __future__ import annotations

import json

import numpy as np
import pytest
from memrl_testing import memrl_cli

from memrl.envs import make_env
from memrl.envs.key_door_agents import KeyDoorAgent, play_trial

CONFIG = {"size": 5, "episode_len": 20, "trial_len": 100}


def _play(kind: str, trials: int) -> tuple[np.ndarray, list[list[float]]]:
    env = make_env("memrl/DarkKeyToDoor-v0", CONFIG)
    agent = KeyDoorAgent(kind, 5, seed=0)
    out = [play_trial(env, agent, seed) for seed in range(trials)]
    return np.array([r for r, _ in out]), [e for _, e in out]


def test_informed_agent_takes_shortest_paths():
    env = make_env("memrl/DarkKeyToDoor-v0", CONFIG)
    agent = KeyDoorAgent("informed", 5)
    total, inner = play_trial(env, agent, seed=3)
    state = env.unwrapped
    start, key, door = state.start_pos, state.key_pos, state.door_pos

    def dist(a, b):
        return abs(a[0] - b[0]) + abs(a[1] - b[1])

    # Every full inner episode takes start -> key -> door (a no-op where two cells coincide).
    steps = max(dist(start, key), 1 if start == key else 0) + max(
        dist(key, door), 1 * (key == door)
    )
    assert all(r == 2.0 for r in inner[:-1])
    assert len(inner) == -(-100 // steps)  # the last one may be cut by the trial's end
    assert total == sum(inner)


def test_memory_sweep_finds_once_and_then_goes_straight():
    returns, inner = _play("sweep_memory", 60)
    ep = [np.mean([e[k] for e in inner]) for k in range(5)]
    assert ep[0] < 1.5  # searching
    assert ep[3] == ep[4] == 2.0  # key and door remembered from then on
    forget, inner_f = _play("sweep_forget", 60)
    ep_f = [np.mean([e[k] for e in inner_f]) for k in range(5)]
    assert max(ep_f) - min(ep_f) < 0.3  # every inner episode searches anew
    assert forget.mean() < 0.3 * returns.mean()


def test_unknown_agent_lists_the_known_ones():
    with pytest.raises(ValueError, match="sweep_memory"):
        KeyDoorAgent("oracle", 5)


def test_bench_reports_the_three_references(tmp_path):
    out = memrl_cli("bench", "key-door-refs", "--trials", "40", "--json", "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r["agent"]: r for r in json.loads(out.stdout[out.stdout.index("[") :])}
    assert rows["sweep_forget"]["trial_return"] < rows["sweep_memory"]["trial_return"]
    assert rows["sweep_memory"]["trial_return"] < rows["informed"]["trial_return"]
    assert (tmp_path / "key-door-refs.parquet").is_file()
    assert (tmp_path / "key-door-refs.png").is_file()
