"""Memo / FCT / RMT policies on long ObjNav-lite trials: SR and SPL per in-context episode index.

Evaluates trained checkpoints (``memrl train configs/objnav_{memo,fct,rmt,mlp}.yaml``) on trials
much longer than the training ones (default 32,000 steps vs 4,096), as the Memo paper does, and
reports per policy variant:

- success rate and SPL of inner episodes grouped by their index in the trial (``--buckets``, e.g.
  0, 1-4, 5-19, 20+): an agent that remembers the layout gets better after its first episodes;
- the same for inner episodes that start inside the training length (t < train trial_len) and
  past ``--late-start`` steps (default 6000: the paper's streaming regime);
- success per stretch of trial time (``--time-bin`` steps, default 2000): SR of the inner
  episodes that start in each stretch and successes per 1000 of its steps, in
  ``objnav-memo-time`` (a line per policy, i.e. variant and run): where, past the training
  length, a policy degrades;
- context tokens and K/V bytes held per env at the trial's end (``MemoTransformer.cache_tokens``
  / ``cache_bytes``) and the mean wall time of one batched policy step.

Streaming variants reuse a run's trained weights with another cache policy at evaluation time:
``--fct-window W`` adds ``fct-window`` for FCT runs (attend to the last W steps only), and
``--memo-cap N`` adds ``memo-stream`` for Memo runs (keep the newest N summary blocks).
``--forget`` adds ``<mode>-forget`` for every transformer run: the same weights with the context
cleared at the start of every inner episode, a memory ablation (what the policy's success owes to
what it saw in earlier inner episodes of the trial; the same success means none). A
``random`` row (uniform actions) is the floor, an ``oracle`` row (the map-knowing shortest-path
agent, ``ObjNavVec.oracle_actions``) the ceiling. A run of the memoryless MLP
(``configs/objnav_mlp.yaml``, RLlib's default PPO module) is evaluated the same way, as the ``mlp``
row: what the same training gives without memory.

The loop steps ``ObjNavVec`` (the batched core the gym env wraps: the same task) and the module's
``forward_inference``/``forward_exploration`` with ``memo_trial_t`` directly, without an RLlib env
runner: it needs the module's caches, which an env runner hides, and it is faster.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from memrl.experiment.tables import Plot, add_output_arguments, write_report

NAME = "objnav-memo"
logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="DIR",
        help="run directory of a memo/fct/rmt/mlp run, or a checkpoint in one (repeatable)",
    )
    parser.add_argument("--trial-len", type=int, default=32000, help="evaluation trial length")
    parser.add_argument("--trials", type=int, default=4, help="trials per variant (run batched)")
    parser.add_argument("--seed", type=int, default=12345, help="env seed (layouts, starts)")
    parser.add_argument("--buckets", default="0,1,5,20", help="first index of each index bucket")
    parser.add_argument("--late-start", type=int, default=6000, help="'late' episodes start here")
    parser.add_argument(
        "--early-end", type=int, default=1024, help="'early' episodes start before this step"
    )
    parser.add_argument(
        "--time-bin",
        type=int,
        default=2000,
        help="steps per stretch of the success-over-time report",
    )
    parser.add_argument("--fct-window", type=int, default=1024, help="streaming FCT window (0: no)")
    parser.add_argument(
        "--memo-cap", type=int, default=0, help="streaming Memo: summary blocks kept (0: no)"
    )
    parser.add_argument(
        "--forget",
        action="store_true",
        help="also evaluate each transformer run with its context cleared at every inner episode",
    )
    parser.add_argument(
        "--greedy", action="store_true", help="take the policy's mode (default: sample from it)"
    )
    parser.add_argument(
        "--no-baselines", action="store_true", help="skip the random and oracle rows"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the rows of an earlier report in --output (other variants or runs), add these",
    )
    add_output_arguments(parser, NAME)


class EpisodeLog:
    """Per inner episode of every env: index in its trial, start step, success, SPL."""

    def __init__(self, num_envs: int) -> None:
        import numpy as np

        self.index = np.zeros(num_envs, np.int64)
        self.start = np.zeros(num_envs, np.int64)
        self.rows: list[tuple[int, int, bool, float]] = []

    def update(self, t: int, result: Any) -> None:
        """Records the inner episodes that ended at trial step t (result: ObjNavVec.step's)."""
        for i in result.episode_done.nonzero()[0]:
            self.rows.append(
                (
                    int(self.index[i]),
                    int(self.start[i]),
                    bool(result.success[i]),
                    float(result.spl[i]),
                )
            )
            self.index[i] += 1
            self.start[i] = t + 1

    def summary(
        self,
        buckets: list[int],
        train_len: int,
        late_start: int,
        trials: int,
        early_end: int | None = None,
        trial_len: int | None = None,
    ) -> dict[str, Any]:
        """SR / SPL per index bucket and per start-time range (t < early_end when given,
        t < train_len, t >= late_start), episodes per trial and, given the evaluated
        ``trial_len``, successes per 1000 steps from late_start on: per-episode SR alone
        flatters a policy that rarely stops; this counts what a trial's late steps yield (the
        scripted references' unit)."""
        out: dict[str, Any] = {"episodes_per_trial": round(len(self.rows) / trials, 1)}
        edges = [*buckets, None]
        groups: list[tuple[str, Any]] = []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            groups.append(
                (
                    bucket_label(lo, hi),
                    lambda r, lo=lo, hi=hi: r[0] >= lo and (hi is None or r[0] < hi),
                )
            )
        if early_end is not None and early_end != train_len:
            groups.append((f"t<{early_end}", lambda r: r[1] < early_end))
        groups.append((f"t<{train_len}", lambda r: r[1] < train_len))
        groups.append((f"t>={late_start}", lambda r: r[1] >= late_start))
        for label, keep in groups:
            sel = [r for r in self.rows if keep(r)]
            out[f"SR {label}"] = round(sum(r[2] for r in sel) / len(sel), 3) if sel else None
            out[f"SPL {label}"] = round(sum(r[3] for r in sel) / len(sel), 3) if sel else None
        out["SR all"] = (
            round(sum(r[2] for r in self.rows) / len(self.rows), 3) if self.rows else None
        )
        if trial_len is not None:
            late_steps = max(trial_len - late_start, 1) * trials
            late_successes = sum(r[2] for r in self.rows if r[1] >= late_start)
            out[f"successes_per_1k t>={late_start}"] = round(1000 * late_successes / late_steps, 2)
        return out

    def timeline(self, bin_steps: int, trial_len: int, trials: int) -> list[dict[str, Any]]:
        """Per stretch [t, t + bin_steps) of the trial: the inner episodes that start in it, their
        SR and SPL, and their successes per 1000 steps of the stretch (over all trials)."""
        out = []
        for lo in range(0, trial_len, bin_steps):
            hi = min(lo + bin_steps, trial_len)
            sel = [r for r in self.rows if lo <= r[1] < hi]
            wins = sum(r[2] for r in sel)
            out.append(
                {
                    "t": lo,
                    "episodes": len(sel),
                    "SR": round(wins / len(sel), 3) if sel else None,
                    "SPL": round(sum(r[3] for r in sel) / len(sel), 3) if sel else None,
                    "successes_per_1k": round(1000 * wins / ((hi - lo) * trials), 2),
                }
            )
        return out


def load_policy(run: str, overrides: dict[str, Any]) -> tuple[Any, dict[str, Any], str, int]:
    """A run's newest (or the given) checkpoint as a MemoRLModule with model overrides, or, for an
    MLP run, as the RLlib module it trained (``overrides`` do not apply; mode "mlp").

    Returns:
        (module, env config of the run, mode, checkpoint iteration)
    """
    import yaml

    from memrl.envs import make_env
    from memrl.experiment.config import parse_config
    from memrl.experiment.evaluate import resolve_checkpoint
    from memrl.experiment.run_dir import CONFIG, checkpoint_iteration, policy_module_dir
    from memrl.methods.baselines import MLPModel
    from memrl.methods.memo.rlmodule import MemoRLModule
    from memrl.methods.memo.settings import MemoModelSettings

    run_dir, ckpt = resolve_checkpoint(run)
    exp = parse_config(yaml.safe_load(run_dir.read_text(CONFIG)))
    iteration = checkpoint_iteration(ckpt.name)
    module_dir = str(policy_module_dir(ckpt))
    if isinstance(exp.model, MLPModel):
        from ray.rllib.core.rl_module.rl_module import RLModule

        module = RLModule.from_checkpoint(module_dir)
        module.eval()
        return module, dict(exp.env.config), "mlp", iteration
    if not isinstance(exp.model, MemoModelSettings):
        raise ValueError(
            f"{run}: model type {type(exp.model).__name__} is neither memo nor mlp; this "
            "benchmark evaluates memo/fct/rmt runs (model: {type: memo}) and MLP runs "
            "(model: {type: mlp})"
        )
    env = make_env(exp.env.id, exp.env.config)
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    model_config = {**exp.model.model_config(exp), **overrides}
    module = MemoRLModule(
        observation_space=obs_space, action_space=act_space, model_config=model_config
    )
    module.restore_from_path(module_dir)
    module.eval()
    return module, dict(exp.env.config), exp.model.mode, iteration


def run_trials(
    module: Any,
    env_config: dict[str, Any],
    args: argparse.Namespace,
    *,
    baseline: str | None = None,
    forget: bool = False,
    timeline: list[dict[str, Any]] | None = None,
    label: str = "",
) -> dict[str, Any]:
    """Steps ``args.trials`` trials of ``args.trial_len`` steps at once; returns the row (and
    appends the success-over-time rows to ``timeline`` when given).

    ``baseline``: "random" (uniform actions) or "oracle" (the map-knowing shortest-path agent)
    instead of the module. ``forget``: the module's context restarts with every inner episode
    (its step counter goes back to 0 there, which clears that row's cache). ``label`` names the
    policy in the progress lines (one per 4000 steps).
    """
    import numpy as np
    import torch
    from ray.rllib.core.columns import Columns

    from memrl.envs.objnav import ObjNavConfig, ObjNavVec
    from memrl.methods.memo.columns import MEMO_TRIAL_T

    cfg = ObjNavConfig.from_kwargs({**env_config, "trial_len": args.trial_len, "seed": args.seed})
    vec = ObjNavVec(args.trials, cfg, autoreset=False)
    obs = vec.reset().copy()
    log = EpisodeLog(args.trials)
    rng = np.random.default_rng(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    seconds = 0.0
    since = np.zeros(args.trials, np.int64)  # steps since each row's context (re)started
    for t in range(args.trial_len):
        if baseline == "random":
            actions = rng.integers(0, 4, args.trials)
        elif baseline == "oracle":
            actions = vec.oracle_actions()
        else:
            start = time.perf_counter()
            batch = {
                Columns.OBS: torch.from_numpy(obs),
                MEMO_TRIAL_T: torch.from_numpy(since.copy()),
            }
            with torch.no_grad():
                logits = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
            if args.greedy:
                actions = logits.argmax(-1).numpy()
            else:
                actions = torch.multinomial(logits.softmax(-1), 1, generator=gen)[:, 0].numpy()
            seconds += time.perf_counter() - start
        result = vec.step(actions)
        log.update(t, result)
        since += 1
        if forget:
            since[result.episode_done] = 0
        obs = result.obs.copy()
        if t % 4000 == 3999:
            logger.info("%s: step %d/%d", label or "policy", t + 1, args.trial_len)
    assert bool(result.trial_done.all()), "every trial ends at trial_len"
    train_len = int(env_config.get("trial_len", 4096))
    row = log.summary(
        parse_buckets(args.buckets),
        train_len,
        args.late_start,
        args.trials,
        args.early_end,
        trial_len=args.trial_len,
    )
    if timeline is not None:
        timeline.extend(log.timeline(args.time_bin, args.trial_len, args.trials))
    if baseline is not None:
        row.update(context_tokens=0, kv_bytes=0, ms_per_step=None)
    elif not hasattr(module, "keeper"):  # the memoryless MLP: no cache
        row.update(
            context_tokens=0, kv_bytes=0, ms_per_step=round(1000 * seconds / args.trial_len, 2)
        )
    else:
        cache = module.keeper.cache
        row.update(
            context_tokens=module.net.cache_tokens(cache),
            kv_bytes=module.net.cache_bytes(cache),
            ms_per_step=round(1000 * seconds / args.trial_len, 2),
        )
    return row


def bucket_label(lo: int, hi: int | None) -> str:
    """The name of the in-context episodes with index in [lo, hi): ep0, ep1-4, ep20+."""
    if hi is None:
        return f"ep{lo}+"
    return f"ep{lo}" if hi == lo + 1 else f"ep{lo}-{hi - 1}"


def parse_buckets(text: str) -> list[int]:
    try:
        edges = [int(x) for x in text.split(",")]
    except ValueError as err:
        raise ValueError(
            f"--buckets must be comma-separated ints like 0,1,5,20, got {text!r}"
        ) from err
    if edges[0] != 0 or edges != sorted(set(edges)):
        raise ValueError(f"--buckets must start at 0 and increase, got {text!r}")
    return edges


def earlier_rows(path: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of an earlier report at ``path`` of variants and runs not in ``rows``, then
    ``rows`` (a second seed's run adds its rows; the same run evaluated again replaces them)."""
    import math

    import pandas as pd

    if not path.is_file():
        return rows
    new = {(r["variant"], r.get("run")) for r in rows}
    kept = []
    for old in pd.read_parquet(path).to_dict("records"):
        if (old["variant"], old.get("run")) not in new:
            kept.append(
                {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in old.items()}
            )
    return kept + rows


def bucket_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The wide rows' per-group SR/SPL as long rows (variant, group, SR, SPL) for plots."""
    out = []
    for r in rows:
        for key in r:
            if key.startswith("SR ") and key != "SR all":
                group = key[3:]
                out.append(
                    {
                        "policy": r.get("policy", r["variant"]),
                        "variant": r["variant"],
                        "group": group,
                        "SR": r[key],
                        "SPL": r[f"SPL {group}"],
                    }
                )
    return out


def variants(mode: str, args: argparse.Namespace) -> list[tuple[str, dict[str, Any], bool]]:
    """(name, model_config overrides, forget) of the variants evaluated for a run of ``mode``."""
    out = [(mode, {}, False)]
    if mode == "fct" and args.fct_window:
        out.append((f"fct-window{args.fct_window}", {"fct_window": args.fct_window}, False))
    if mode == "memo" and args.memo_cap:
        out.append((f"memo-stream{args.memo_cap}", {"max_summaries": args.memo_cap}, False))
    if mode != "mlp" and args.forget:
        out.append((f"{mode}-forget", {}, True))
    return out


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    if not args.run:
        raise ValueError("give at least one --run DIR (a memo, fct or rmt run directory)")
    if args.trial_len < 1 or args.trials < 1:
        raise ValueError(
            f"--trial-len and --trials must be >= 1, got {args.trial_len}, {args.trials}"
        )
    if args.time_bin < 1:
        raise ValueError(f"--time-bin must be >= 1 step, got {args.time_bin}")
    parse_buckets(args.buckets)
    rows: list[dict[str, Any]] = []
    times: list[dict[str, Any]] = []
    env_config: dict[str, Any] = {}

    def evaluate(row: dict[str, Any], module: Any, **kwargs: Any) -> None:
        """Runs one policy's trials into ``row`` (appended to ``rows``) and its success over trial
        time into ``times``; the policy is named by its variant and run (a baseline by its own)."""
        start = time.perf_counter()
        timeline: list[dict[str, Any]] = []
        row.update(
            run_trials(module, env_config, args, timeline=timeline, label=row["variant"], **kwargs)
        )
        row["policy"] = row["variant"] if row["run"] == "-" else f"{row['variant']} {row['run']}"
        keys = {k: row[k] for k in ("policy", "variant", "run")}
        times.extend({**keys, **r} for r in timeline)
        row["eval_wall_s"] = round(time.perf_counter() - start, 1)
        rows.append(row)
        logger.info("%s: %s", row["policy"], row)

    for run_path in args.run:
        _, env_config, mode, _ = load_policy(run_path, {})
        for name, overrides, forget in variants(mode, args):
            module, env_config, _, iteration = load_policy(run_path, overrides)
            row = {"variant": name, "run": Path(run_path).name, "iteration": iteration}
            evaluate(row, module, forget=forget)
    for baseline in () if args.no_baselines else ("random", "oracle"):
        evaluate({"variant": baseline, "run": "-", "iteration": 0}, None, baseline=baseline)
    if args.append:
        rows = earlier_rows(Path(args.output) / f"{NAME}.parquet", rows)
        times = earlier_rows(Path(args.output) / f"{NAME}-time.parquet", times)
    title = f"ObjNav-lite, {args.trials} trials of {args.trial_len} steps"
    write_report(
        NAME,
        rows,
        args.output,
        plots=[
            Plot(x="policy", y="SR all", kind="bar", title="success rate, all inner episodes"),
            Plot(x="policy", y=f"SR t>={args.late_start}", kind="bar", title="SR, late episodes"),
            Plot(x="policy", y="context_tokens", kind="bar", title="context tokens per env"),
        ],
        as_json=args.json,
        title=title,
    )
    write_report(
        f"{NAME}-buckets",
        bucket_rows(rows),
        args.output,
        plots=[
            Plot(x="group", y="SR", group="policy", kind="bar", title="SR per episode group"),
            Plot(x="group", y="SPL", group="policy", kind="bar", title="SPL per episode group"),
        ],
        as_json=args.json,
        title=title + ": per inner-episode group",
    )
    write_report(
        f"{NAME}-time",
        times,
        args.output,
        plots=[
            Plot(
                x="t",
                y=y,
                group="policy",
                title=panel,
                xlabel="step of the trial (stretch start t)",
            )
            for y, panel in (
                ("SR", "SR of the episodes starting in the stretch from t"),
                ("successes_per_1k", "successes per 1000 steps of the stretch from t"),
            )
        ],
        as_json=args.json,
        title=title + f": success over trial time ({args.time_bin}-step stretches)",
    )
    return 0
