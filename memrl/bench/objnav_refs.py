"""ObjNav-lite scripted references: success and SPL of inner episodes early and late in a trial.

Runs each agent of ``memrl.envs.objnav.agents`` (an explorer that remembers the layout, the same
explorer without memory across inner episodes, and the map oracle) on ``--envs`` trials of
``--trial-len`` steps (the same layouts and inner-episode draws for every agent: same seeds, and
the draws do not depend on the actions) and reports, for inner episodes that start in the trial's
first ``--early`` steps and for those that start at or after ``--late``: the episodes, their
success rate and SPL, and the successes per 1000 steps; and the same (without the rate per step)
by the episode's index in its trial (``--buckets``: ep0, ep1-4, ep5-19, ep20+, as ``memrl bench
objnav-memo`` groups them). The memory explorer's late SPL against the memoryless one's is what
remembering the layout is worth; its ep0 against its later episodes, how soon it pays.
``--config`` takes the env settings from an experiment YAML (e.g. ``configs/objnav_memo.yaml``)
so the references are measured on the map the agents are trained on; without it the env's
defaults are used.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

NAME = "objnav-refs"
logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--envs", type=int, default=4, help="trials run side by side")
    parser.add_argument("--trial-len", type=int, default=8192, help="steps per trial")
    parser.add_argument("--early", type=int, default=1024, help="the early phase: t < EARLY")
    parser.add_argument("--late", type=int, default=6000, help="the late phase: t >= LATE")
    parser.add_argument(
        "--agents", default="explore_memory,explore_forget,oracle", help="comma-separated agents"
    )
    parser.add_argument(
        "--buckets",
        default="0,1,5,20",
        help="first in-context episode index of each index group (rows ep0, ep1-4, ...)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--config",
        default=None,
        help="experiment YAML (or a run's config.yaml) whose env.config sets the map "
        "(default: the env's defaults)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a value of --config, as `memrl train --set` does, e.g. "
        "--set env.config.view_radius=2 (repeatable)",
    )
    add_output_arguments(parser, NAME)


def env_settings(config_path: str | None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """env.config of the experiment YAML at ``config_path`` with ``overrides`` (KEY=VALUE, as
    ``memrl train --set``) applied ({} when None); it must be ObjNav's."""
    if config_path is None:
        if overrides:
            raise ValueError(
                f"--set {overrides[0]} needs --config: the overrides apply to an experiment "
                "YAML, e.g. --config configs/objnav_memo.yaml --set env.config.rooms=1"
            )
        return {}
    from memrl.experiment.config import load_config

    exp = load_config(config_path, list(overrides))
    if exp.env.id != "memrl/ObjNav-v0":
        raise ValueError(
            f"--config {config_path}: env.id is {exp.env.id!r}; the references run on "
            "memrl/ObjNav-v0 (e.g. configs/objnav_memo.yaml)"
        )
    return dict(exp.env.config)


def measure(
    kind: str, args: argparse.Namespace, settings: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One agent's rows by phase (early, late) and by index in the trial; ``settings``:
    env.config (see ``env_settings``)."""
    import numpy as np

    from memrl.bench.objnav_memo import EpisodeLog, bucket_label, parse_buckets
    from memrl.envs.objnav import ObjNavConfig, ObjNavVec
    from memrl.envs.objnav.agents import ObjNavAgents

    config = {**(settings or {}), "seed": args.seed, "trial_len": args.trial_len}
    vec = ObjNavVec(args.envs, ObjNavConfig.from_kwargs(config))
    vec.reset()
    agent = ObjNavAgents(kind, vec)
    log = EpisodeLog(args.envs)
    t0 = time.perf_counter()
    for t in range(args.trial_len):
        log.update(t, vec.step(agent.act()))
        if t % 4000 == 3999:
            logger.info("%s: step %d/%d", kind, t + 1, args.trial_len)
    seconds = time.perf_counter() - t0
    index, start, success, spl = (np.array(column) for column in zip(*log.rows, strict=True))

    def summary(pick: Any) -> dict[str, Any]:
        n = int(pick.sum())
        return {
            "episodes": n,
            "success_rate": float(success[pick].mean()) if n else float("nan"),
            "spl": float(spl[pick].mean()) if n else float("nan"),
        }

    phases = []
    for phase, pick, steps in (
        ("early", start < args.early, args.early),
        ("late", start >= args.late, args.trial_len - args.late),
    ):
        phases.append(
            {
                "agent": kind,
                "phase": phase,
                **summary(pick),
                "successes_per_1k_steps": 1000.0 * float(success[pick].sum()) / (steps * args.envs),
                "seconds": seconds,
            }
        )
    # By index in the trial: memory shows as later episodes doing better than the first.
    by_index = []
    edges = [*parse_buckets(args.buckets), None]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        pick = index >= lo if hi is None else (index >= lo) & (index < hi)
        by_index.append({"agent": kind, "group": bucket_label(lo, hi), **summary(pick)})
    return phases, by_index


def run(args: argparse.Namespace) -> int:
    if not 0 < args.early <= args.late < args.trial_len:
        raise ValueError(
            f"need 0 < --early <= --late < --trial-len, got {args.early}, {args.late}, "
            f"{args.trial_len}"
        )
    from memrl.bench.objnav_memo import parse_buckets

    parse_buckets(args.buckets)
    # a wrong config or --set fails before any agent runs
    settings = env_settings(args.config, args.overrides)
    rows, by_index = [], []
    for kind in (a.strip() for a in args.agents.split(",") if a.strip()):
        phases, groups = measure(kind, args, settings)
        rows += phases
        by_index += groups
    title = f"ObjNav-lite scripted references: {args.envs} trials of {args.trial_len} steps"
    write_report(
        NAME,
        rows,
        args.output,
        plots=[
            Plot(x="agent", y="spl", group="phase", kind="bar", title="SPL of inner episodes"),
            Plot(
                x="agent",
                y="successes_per_1k_steps",
                group="phase",
                kind="bar",
                title="successes per 1000 steps",
            ),
        ],
        as_json=args.json,
        title=f"{title}, early t < {args.early}, late t >= {args.late}",
    )
    write_report(
        f"{NAME}-buckets",
        by_index,
        args.output,
        plots=[
            Plot(x="group", y="success_rate", group="agent", kind="bar", title="SR by index"),
            Plot(x="group", y="spl", group="agent", kind="bar", title="SPL by index"),
        ],
        as_json=args.json,
        title=f"{title}: inner episodes by index in the trial",
    )
    return 0
