"""Replays of evaluation trials: the recorded trajectory is exactly the evaluated one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers.vector import DictInfoToList
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from memrl.envs.key_door import DarkKeyToDoorEnv
from memrl.envs.objnav import ObjNavEnv
from memrl.experiment.replay import ReplayRecorder, replays_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
MOVES = {0: (0, 0), 1: (0, 1), 2: (0, -1), 3: (-1, 0), 4: (1, 0)}


def _vector(make, n):
    return DictInfoToList(gym.vector.SyncVectorEnv([make for _ in range(n)]))


def _run(recorder, steps, seed, actions_of):
    """Steps like RLlib's runner (NEXT_STEP autoreset); returns every finished trial as an
    episode built from what the runner saw, and the hidden states seen at each step."""
    obs, _ = recorder.reset(seed=seed)
    n = recorder.num_envs
    live = [{"obs": [obs[i]], "actions": [], "rewards": []} for i in range(n)]
    done, ends = [], np.zeros(n, bool)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        actions = actions_of(rng, n)
        obs, rewards, term, trunc, _ = recorder.step(actions)
        for i in range(n):
            if ends[i]:
                live[i] = {"obs": [obs[i]], "actions": [], "rewards": []}
                continue
            live[i]["obs"].append(obs[i])
            live[i]["actions"].append(int(actions[i]))
            live[i]["rewards"].append(float(rewards[i]))
            if term[i] or trunc[i]:
                done.append(
                    SingleAgentEpisode(
                        observations=live[i]["obs"],
                        actions=live[i]["actions"],
                        rewards=live[i]["rewards"],
                        truncated=True,
                        len_lookback_buffer=0,
                    )
                )
        ends = np.logical_or(term, trunc)
    return done


def test_key_door_replays_are_the_episodes_and_follow_the_rules():
    size, episode_len, trial_len = 4, 6, 20
    recorder = ReplayRecorder(
        _vector(lambda: DarkKeyToDoorEnv(size, episode_len, trial_len), 3),
        "memrl/DarkKeyToDoor-v0",
    )
    episodes = _run(
        recorder, 3 * trial_len + 5, seed=7, actions_of=lambda r, n: r.integers(0, 5, n)
    )
    assert len(episodes) >= 6
    replays = replays_for(recorder, episodes, limit=len(episodes))
    assert [r["episode"] for r in replays] == list(range(len(episodes)))
    for replay, ep in zip(replays, episodes, strict=True):
        steps = replay["steps"]
        assert [s[3] for s in steps[1:]] == list(ep.get_actions())
        assert sum(s[4] for s in steps) == replay["return"] == pytest.approx(ep.get_return())
        # Replay the recorded actions on the recorded layout with the env's rules: every step
        # lands where the replay says, rewards come at the key and at the door with the key.
        x, y, has_key, t, k = *replay["start"], False, 0, 0
        for n, (sx, sy, s_key, action, reward, inner) in enumerate(steps[1:], start=1):
            dx, dy = MOVES[action]
            x, y = min(max(x + dx, 0), size - 1), min(max(y + dy, 0), size - 1)
            t += 1
            expect, success = 0.0, False
            if not has_key and [x, y] == replay["key"]:
                has_key, expect = True, 1.0
            elif has_key and [x, y] == replay["door"]:
                expect, success = 1.0, True
            assert (sx, sy, bool(s_key), reward, inner) == (x, y, has_key, expect, k), f"step {n}"
            # The observation the policy got shows the same cell (dark: x/size, y/size).
            if not success and t < episode_len:
                assert ep.get_observations()[n][:2] == pytest.approx([x / size, y / size])
            if success or t == episode_len:
                x, y, has_key, t, k = *replay["start"], False, 0, k + 1  # next inner episode
                assert [s[5] for s in steps[n + 1 : n + 2]] in ([], [inner + 1])


def test_a_trial_that_differs_from_the_episode_is_not_used():
    recorder = ReplayRecorder(
        _vector(lambda: DarkKeyToDoorEnv(4, 5, 10), 2), "memrl/DarkKeyToDoor-v0"
    )
    episodes = _run(recorder, 12, seed=1, actions_of=lambda r, n: r.integers(0, 5, n))
    ep = episodes[0]
    rewards = list(ep.get_rewards())
    rewards[3] += 1.0
    changed = SingleAgentEpisode(
        observations=list(ep.get_observations()),
        actions=list(ep.get_actions()),
        rewards=rewards,
        truncated=True,
        len_lookback_buffer=0,
    )
    assert replays_for(recorder, [changed], limit=1) == []
    assert len(replays_for(recorder, [ep], limit=1)) == 1


def test_objnav_replay_records_the_map_pose_and_view():
    config = {"grid_size": 12, "rooms": 2, "num_categories": 3, "episode_len": 8, "trial_len": 16}
    envs = [ObjNavEnv(**config) for _ in range(2)]
    it = iter(envs)
    recorder = ReplayRecorder(
        DictInfoToList(gym.vector.SyncVectorEnv([lambda: next(it) for _ in envs])),
        "memrl/ObjNav-v0",
    )
    poses = []  # env 0's pose after every step, read from the env itself
    step = recorder.step

    def step_and_look(actions):
        out = step(actions)
        vec = envs[0].vec
        poses.append([*map(int, vec.positions()[0]), int(vec.heading[0])])
        return out

    recorder.step = step_and_look
    episodes = _run(recorder, 16, seed=3, actions_of=lambda r, n: r.integers(0, 4, n))
    replays = replays_for(recorder, episodes, limit=4)
    assert len(replays) == len(episodes) == 2
    layout = envs[0].vec.layouts[0]
    pad = layout.pad
    first = replays[0]  # env 0 finished first (same step, lower index)
    assert first["grid"] == layout.grid[pad : pad + 12, pad : pad + 12].astype(int).tolist()
    assert len(first["colors"]) == 3
    assert [s[:3] for s in first["steps"][1:]] == poses
    assert all(len(s[4]) > 0 for s in first["steps"])  # the cells in view, at every step
    json.dumps(first)  # plain JSON


@pytest.mark.slow
def test_memrl_eval_writes_replays_of_its_own_trials(tmp_path):
    from memrl.experiment.evaluate import evaluate_checkpoint

    run = tmp_path / "mlp"
    shutil.copytree(FIXTURES / "mlp_v0_1", run)
    with pytest.raises(ValueError, match="--episodes must be >= 1, got 0"):
        evaluate_checkpoint(run, episodes=0, echo=lambda *_: None)
    result = evaluate_checkpoint(run, episodes=4, replays=2, echo=lambda *_: None)
    assert not (run / "rllib").exists()  # an evaluation leaves no RLlib log dir in the run
    folder = run / "eval"
    ckpt = Path(result["checkpoint"]).name
    assert json.loads((folder / f"{ckpt}.json").read_text())["returns"] == result["returns"]
    trials = json.loads((folder / f"{ckpt}.replay.json").read_text())["trials"]
    assert len(trials) == 2
    for trial in trials:
        assert trial["return"] == pytest.approx(result["returns"][trial["episode"]])
        assert len(trial["steps"]) == result["len_mean"] + 1
    page = (run / "report.html").read_text()
    assert 'id="replay"' in page and 'id="evaluation"' in page
