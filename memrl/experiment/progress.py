"""What a run shows and keeps of each iteration: the metrics row, the progress line, the summary.

``metrics_row`` turns RLlib's nested result dict into one flat row of ``metrics.parquet`` (the same
row every logger receives); ``progress_line`` is the line ``memrl train`` prints per iteration;
``summary_table`` is the table printed at the end and kept as ``summary.md``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from memrl.experiment.memory_verdict import memory_line, success_line
from memrl.experiment.tables import format_table


def flatten(result: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "/"))
        else:
            out[name] = value
    return out


def _scalar(value: Any) -> float | None:
    if hasattr(value, "item"):
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


def metrics_row(result: dict[str, Any], algo: Any) -> dict[str, Any]:
    """One metrics.parquet row from an RLlib result dict (new API stack layout)."""
    flat = flatten(result)

    def get(*keys: str, default: float = math.nan) -> float:
        for k in keys:
            v = _scalar(flat.get(k))
            if v is not None:
                return v
        return default

    row: dict[str, Any] = {
        "training_iteration": int(result.get("training_iteration", algo.iteration)),
        "env_steps_sampled": int(
            get(
                "env_runners/num_env_steps_sampled_lifetime",
                "num_env_steps_sampled_lifetime",
                default=0,
            )
        ),
        "episode_return_mean": get("env_runners/episode_return_mean"),
        "episode_len_mean": get("env_runners/episode_len_mean"),
        "num_episodes": get("env_runners/num_episodes", default=0.0),
        "time_total_s": get("time_total_s", default=0.0),
        "time_this_iter_s": get("time_this_iter_s", default=0.0),
        "env_step_failures": get("env_runners/num_env_step_failures", default=0.0),
        "env_runner_restarts": float(
            getattr(algo, "_counters", {}).get("total_num_restored_workers", 0)
        ),
    }
    acted = get("env_runners/weights_seq_no")
    learned = get("learners/default_policy/weights_seq_no")
    if math.isfinite(acted) and math.isfinite(learned):
        # Weight versions between the policy that acted the trained batch and the learner's
        # before this update: 0 in PPO, 1 with resources.overlap_sampling.
        row["acting_lag"] = learned - acted - 1
    group = algo.env_runner_group
    healthy = group.num_healthy_remote_workers() if group is not None else 0
    row["healthy_env_runners"] = float(healthy)
    row["env_runners_down"] = float(algo.config.num_env_runners - healthy)
    for key in sorted(flat):
        if key.startswith("env_runners/inner_") or key.startswith("env_runners/memory/"):
            v = _scalar(flat[key])
            if v is not None:
                row[key.split("/", 1)[1].replace("/", "_")] = v
        elif key.startswith("learners/") and key.count("/") == 2:
            _, module_id, name = key.split("/")
            v = _scalar(flat[key])
            if v is not None and module_id != "__all_modules__":
                row[
                    f"learner_{name}"
                    if module_id == "default_policy"
                    else f"learner_{module_id}_{name}"
                ] = v
    return row


def progress_line(row: dict[str, Any], stop_iters: int, steps_per_s: float) -> str:
    it = row["training_iteration"]
    parts = [
        f"iter {it}" + (f"/{stop_iters}" if stop_iters else ""),
        f"steps {row['env_steps_sampled']:,}",
        f"return {row['episode_return_mean']:.3f}",
        f"len {row['episode_len_mean']:.1f}",
    ]
    inner = [
        row[k]
        for k in (f"inner_return_{i}" for i in range(10))
        if k in row and math.isfinite(row[k])
    ]
    if len(inner) >= 2:  # the first inner episodes of a trial: later ones are better with memory
        parts.append("inner ep0-3 " + " ".join(f"{v:.2f}" for v in inner[:4]))
    if "learner_total_loss" in row:
        parts.append(f"loss {row['learner_total_loss']:.3f}")
    if row["env_runner_restarts"] or row["env_step_failures"] or row["env_runners_down"]:
        parts.append(
            f"runners down {row['env_runners_down']:.0f} restarts {row['env_runner_restarts']:.0f}"
            f" env-failures {row['env_step_failures']:.0f}"
        )
    parts.append(f"{steps_per_s:,.0f} steps/s")
    parts.append(f"{row['time_total_s']:.0f}s")
    return " | ".join(parts)


def summary_table(rows: list[dict[str, Any]], wall_s: float, env_id: str | None = None) -> str:
    """The end-of-run table: last and best return, steps, speed, restarts, and the verdict on
    memory (or success) when the rows allow one."""
    last = rows[-1]
    best = max(
        rows,
        key=lambda r: (
            -math.inf if math.isnan(r["episode_return_mean"]) else r["episode_return_mean"]
        ),
    )
    summary = [
        {
            "iterations": last["training_iteration"],
            "env_steps": last["env_steps_sampled"],
            "return_last": last["episode_return_mean"],
            "return_best": best["episode_return_mean"],
            "best_iter": best["training_iteration"],
            "len_last": last["episode_len_mean"],
            "wall_s": round(wall_s, 1),
            "steps_per_s": last["env_steps_sampled"] / max(last["time_total_s"], 1e-9),
            "restarts": last["env_runner_restarts"],
        }
    ]
    inner = {
        k: v
        for k, v in last.items()
        if re.fullmatch(r"inner_return_(\d+|later)", k) and math.isfinite(v)
    }
    table = format_table(summary)
    if inner:
        table += "\n\nReturn per inner-episode index (last iteration):\n" + format_table([inner])
    line = memory_line(rows)
    if line is None and env_id is not None:
        line = success_line(rows, env_id)
    if line:
        table += "\n\n" + line
    return table
