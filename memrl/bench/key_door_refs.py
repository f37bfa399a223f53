"""Dark-Key-To-Door scripted references: trial return with memory, without it, and informed.

Plays ``--trials`` trials (seeds 0..N-1, the same layouts for every agent) with each scripted
agent of ``memrl.envs.key_door_agents`` and reports the mean trial return with its standard error,
and the mean return of inner episodes 0-4. The gap between ``sweep_memory`` and ``sweep_forget``
is what remembering key and door within a trial is worth; a trained agent with memory should move
from the second towards the first (``informed`` is the ceiling).
"""

from __future__ import annotations

import argparse
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

NAME = "key-door-refs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=5, help="grid size (default: %(default)s)")
    parser.add_argument("--episode-len", type=int, default=20, help="steps per inner episode")
    parser.add_argument("--trial-len", type=int, default=100, help="steps per trial")
    parser.add_argument("--trials", type=int, default=400, help="trials per agent")
    parser.add_argument(
        "--agents", default="sweep_memory,sweep_forget,informed", help="comma-separated agents"
    )
    add_output_arguments(parser, NAME)


def measure(agent_kind: str, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from memrl.envs import make_env
    from memrl.envs.key_door_agents import KeyDoorAgent, play_trial

    env = make_env(
        "memrl/DarkKeyToDoor-v0",
        {"size": args.size, "episode_len": args.episode_len, "trial_len": args.trial_len},
    )
    agent = KeyDoorAgent(agent_kind, args.size, seed=0)
    returns, inner = [], []
    for seed in range(args.trials):
        total, by_episode = play_trial(env, agent, seed)
        returns.append(total)
        inner.append(by_episode)
    env.close()
    values = np.asarray(returns)
    row: dict[str, Any] = {
        "agent": agent_kind,
        "trials": args.trials,
        "trial_return": float(values.mean()),
        "trial_return_se": float(values.std(ddof=1) / np.sqrt(len(values))),
        "inner_episodes": float(np.mean([len(e) for e in inner])),
    }
    for k in range(5):
        got = [e[k] for e in inner if len(e) > k]
        row[f"inner_return_{k}"] = float(np.mean(got)) if got else float("nan")
    return row


def run(args: argparse.Namespace) -> int:
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    if args.trials < 2:
        raise ValueError(f"--trials must be >= 2 (a standard error needs two), got {args.trials}")
    rows = [measure(kind, args) for kind in agents]
    write_report(
        NAME,
        rows,
        args.output,
        plots=[Plot(x="agent", y="trial_return", kind="bar", title="trial return")],
        as_json=args.json,
        title=(
            f"Dark-Key-To-Door {args.size}x{args.size}, {args.episode_len}-step inner episodes, "
            f"{args.trial_len}-step trials: scripted references"
        ),
    )
    return 0
