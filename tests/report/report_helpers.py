"""Run directories as `memrl train` and `memrl eval` leave them, written directly for report tests.

A Dark-Key-To-Door run (metrics with inner-episode returns, an evaluation with replays) and a MEM1
run (metrics of an LLM agent, an evaluation with transcripts in the layout `memrl eval` writes).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

KEY_DOOR_CONFIG = {
    "name": "dktd_run",
    "env": {"id": "memrl/DarkKeyToDoor-v0", "config": {"size": 4, "episode_len": 6}},
    "algorithm": {"name": "ppo"},
    "model": {"type": "memo", "mode": "memo"},
    "run": {"stop_iters": 30},
}

MEM1_CONFIG = {
    "name": "mem1_run",
    "env": {"id": "memrl/DocQA-v0", "config": {"objectives": 2}},
    "algorithm": {"name": "mem1", "context_policy": "mem1", "prompt": {"format": "qa"}},
    "model": {"type": "llm", "path": "tiny"},
    "run": {"stop_iters": 12},
}


def key_door_rows(n: int = 30, memory: bool = True, spread: float | None = None) -> list[dict]:
    """Metrics rows whose later inner episodes beat the first (memory) or do not; with
    ``spread``, also the mean squared returns of a task with that variance (40 trials a row)."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        progress = i / (n - 1)
        first = 0.6 + 0.2 * progress
        later = first + (0.9 * progress if memory else 0.0)
        row = {
            "training_iteration": i + 1,
            "env_steps_sampled": 4000 * (i + 1),
            "episode_return_mean": first + 4 * later + rng.normal(0, 0.05),
            "episode_len_mean": 100.0,
            "time_total_s": 3.0 * (i + 1),
            "inner_success_rate": 0.2 + 0.3 * progress,
            "learner_total_loss": 1.0 - 0.5 * progress,
            "learner_entropy": 1.6 - progress,
            "inner_return_0": first + rng.normal(0, 0.05),
        }
        for k in range(1, 5):
            row[f"inner_return_{k}"] = later + rng.normal(0, 0.05)
        if spread is not None:
            row["num_episodes"] = 40.0
            for k in range(5):
                row[f"inner_return_sq_{k}"] = row[f"inner_return_{k}"] ** 2 + spread
        rows.append(row)
    return rows


def key_door_trial(episode: int) -> dict:
    """A replay trial on a 4x4 grid: the first inner episode searches, the second goes straight."""
    start, key, door = [0, 0], [0, 2], [2, 2]
    # (x, y, has_key, action, reward) after each step.
    search = [(1, 0, 0, 4, 0), (1, 1, 0, 1, 0), (0, 1, 0, 3, 0), (0, 2, 1, 1, 1), (1, 2, 1, 4, 0)]
    search += [(2, 2, 1, 4, 1)]
    straight = [(0, 1, 0, 1, 0), (0, 2, 1, 1, 1), (1, 2, 1, 4, 0), (2, 2, 1, 4, 1)]
    steps = [[*start, 0, -1, 0.0, 0]]
    for inner, path in enumerate((search, straight)):
        steps += [[x, y, k, a, float(r), inner] for x, y, k, a, r in path]
    return {
        "kind": "key_door",
        "size": 4,
        "episode_len": 6,
        "start": start,
        "key": key,
        "door": door,
        "episode": episode,
        "return": float(sum(s[4] for s in steps)),
        "inner_returns": [2.0, 2.0],
        "steps": steps,
    }


def make_key_door_run(root: Path, memory: bool = True, evaluated: bool = True) -> Path:
    run = root / "dktd_run"
    (run / "eval").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(KEY_DOOR_CONFIG))
    pd.DataFrame(key_door_rows(memory=memory)).to_parquet(run / "metrics.parquet")
    if evaluated:
        by_index = [0.8, 1.9, 1.95, 2.0] if memory else [0.8, 0.75, 0.8, 0.7]
        result = {
            "checkpoint": "x",
            "episodes": 4,
            "return_mean": 6.6,
            "return_std": 0.3,
            "len_mean": 100.0,
            "inner_return_by_index": by_index,
            "inner_success_rate": 0.7,
            "returns": [6.0, 7.0, 6.5, 6.9],
        }
        (run / "eval" / "iter_000030.json").write_text(json.dumps(result))
        trials = [key_door_trial(0), key_door_trial(1)]
        (run / "eval" / "iter_000030.replay.json").write_text(json.dumps({"trials": trials}))
    return run


def mem1_rows(n: int = 12) -> list[dict]:
    """MEM1 metrics: no env-step count, text scores and memory figures from the learner."""
    return [
        {
            "training_iteration": i + 1,
            "env_steps_sampled": 10 * i,  # turns, not env steps of a simulator
            "episode_return_mean": 0.0,  # the text runner's episodes carry no reward
            "learner_reward_mean": 0.1 + 0.05 * i,
            "time_total_s": 10.0 * (i + 1),
            "learner_rollout_em": 0.1 + 0.03 * i,
            "learner_rollout_f1": 0.2 + 0.03 * i,
            # held-out evaluations every other iteration
            "learner_eval_em": 0.05 + 0.03 * i if i % 2 == 0 else float("nan"),
            "learner_eval_unseen_em": 0.02 * i if i % 2 == 0 else float("nan"),
            "learner_rollout_peak_tokens": 300.0 + i,
            "learner_rollout_dependency": 20000.0 + 100 * i,
            "learner_rollout_mean_context_tokens": 250.0,
            "learner_total_loss": 0.5,
        }
        for i in range(n)
    ]


def mem1_episode(task: str, em: float, contexts: list[int]) -> dict:
    """A transcript line in the layout `memrl eval` writes for MEM1 runs."""
    turns = []
    for j, context in enumerate(contexts):
        info = f"<information> passage {j} </script> </information>"
        last = j == len(contexts) - 1
        action = "<answer> Paris; 1889 </answer>" if last else f"<search> query {j} </search>"
        turns.append(
            {
                "context_tokens": context,
                "generated": f"<think> facts known after turn {j} </think> {action}",
                # a closing script tag in env text must not break the report page
                "observation": "" if last else info,
            }
        )
    return {
        "task_id": task,
        "prompt": "Answer the questions. Questions: capital of France?; year of the tower?",
        "turns": turns,
        "reward": em,
        "format_errors": 0,
        "truncated": False,
        "em": em,
        "f1": em,
        "peak_tokens": max(contexts) + 20,
        "dependency": 12345.0,
    }


def make_mem1_run(root: Path) -> Path:
    run = root / "mem1_run"
    (run / "eval").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(MEM1_CONFIG))
    pd.DataFrame(mem1_rows()).to_parquet(run / "metrics.parquet")
    result = {
        "checkpoint": "x",
        "episodes": 3,
        "return_mean": 0.667,
        "return_std": 0.47,
        "len_mean": 4.0,
        "em_mean": 0.667,
        "f1_mean": 0.7,
        "peak_tokens_mean": 140.0,
        "transcripts": str(run / "eval" / "iter_000012.transcripts.jsonl"),
    }
    (run / "eval" / "iter_000012.json").write_text(json.dumps(result))
    lines = [
        mem1_episode("task-0", 1.0, [40, 70, 75, 80]),
        mem1_episode("task-1", 0.0, [40, 66, 71]),
        mem1_episode("task-2", 1.0, [40, 72, 74, 79]),
    ]
    (run / "eval" / "iter_000012.transcripts.jsonl").write_text(
        "\n".join(json.dumps(line) for line in lines) + "\n"
    )
    return run
