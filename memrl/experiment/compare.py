"""`memrl compare RUN_DIR...`: several runs and seeds on one plot, and a table at equal env steps.

Runs are grouped by label (``--label``, one per run; by default the run's config name, or, for a
config without one, the env and the model: ``memrl/DarkKeyToDoor-v0 memo``): the runs of one
label are seeds of one setting, and a warning names what differs when runs under one label
differ in more than ``run.seed``. Each run's curve is smoothed with a moving average (the same
window as its report), put on a common grid of env steps by linear interpolation, and each label
is drawn as the mean over its runs with a band from the lowest to the highest run. The table
gives, per label, the mean and standard deviation over runs at a few equal env-step counts, up to
the step count that every run reached.

Writes ``compare.png``, ``compare.parquet`` (the table), ``compare_curves.parquet`` (every run's
smoothed curve on the grid, long format) and ``compare.md`` under ``--output``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memrl.experiment.run_dir import CONFIG, METRICS, RunDir
from memrl.experiment.run_plots import short_count, smoothing_window
from memrl.experiment.tables import axis_label, format_number, read_table, write_report

logger = logging.getLogger(__name__)

GRID_POINTS = 200
"""Points of the common env-step grid of the curves."""
SEED_KEY = "run.seed"
"""The one config key in which runs of one label (seeds of one setting) may differ."""


def default_label(config: dict[str, Any]) -> str:
    """A run's label from its config: its name, else its env and model."""
    if config.get("name"):
        return str(config["name"])
    env = (config.get("env") or {}).get("id", "unknown env")
    return f"{env} {model_label(config)}"


def model_label(config: dict[str, Any]) -> str:
    """The model of a run's config (Memo's mode), or the agent's context policy."""
    model = config.get("model") or {}
    algorithm = config.get("algorithm") or {}
    kind = str(model.get("type", "mlp"))
    if kind == "memo":
        return str(model.get("mode", "memo"))
    if kind == "llm":
        return (
            f"{algorithm.get('name', 'mem1')} ({algorithm.get('context_policy', 'mem1')} context)"
        )
    return kind


def load_run(path: str | Path, metric: str) -> tuple[dict[str, Any], str, np.ndarray, np.ndarray]:
    """(config, x column, x, y) of one run: env steps (or iterations) and the smoothed metric.

    Raises:
        FileNotFoundError: not a run directory, or it has no metrics yet.
        ValueError: the run never logged ``metric`` (the message lists what it has), or its
            config.yaml or metrics.parquet cannot be read (the message names the file).
    """

    run = Path(path)
    if not (run / CONFIG).is_file() or not (run / METRICS).is_file():
        raise FileNotFoundError(
            f"{run} is not a run directory with metrics (config.yaml and metrics.parquet); "
            "give directories that `memrl train` wrote"
        )
    config = RunDir(run).read_config()
    frame = read_table(run / METRICS)
    if metric not in frame or frame[metric].notna().sum() == 0:
        numeric = sorted(c for c in frame.columns if frame[c].dtype.kind in "fi")
        raise ValueError(f"{run} has no values of {metric!r}; its metrics: {numeric}")
    frame = frame[frame[metric].notna()]
    x_col = (
        "env_steps_sampled" if frame["env_steps_sampled"].nunique() > 1 else "training_iteration"
    )
    frame = frame.sort_values(x_col)
    y = frame[metric].astype(float).rolling(smoothing_window(len(frame)), min_periods=1).mean()
    return config, x_col, frame[x_col].to_numpy(dtype=float), y.to_numpy()


def compare_runs(
    run_dirs: Sequence[str | Path],
    labels: Sequence[str] | None = None,
    *,
    output: str | Path = "compare_out",
    metric: str = "episode_return_mean",
    points: int = 4,
    as_json: bool = False,
) -> dict[str, Any]:
    """Compares runs (see the module docstring); returns the table rows and the output paths.

    Raises:
        ValueError: labels given but not one per run, or fewer than one run.
    """
    import pandas as pd

    if not run_dirs:
        raise ValueError("memrl compare needs at least one run directory")
    if labels and len(labels) != len(run_dirs):
        raise ValueError(
            f"got {len(labels)} --label for {len(run_dirs)} runs: give one label per run "
            "(in the same order), or none to label runs by their model"
        )
    runs = []
    configs = []
    x_cols = set()
    for i, path in enumerate(run_dirs):
        config, x_col, x, y = load_run(path, metric)
        x_cols.add(x_col)
        label = labels[i] if labels else default_label(config)
        runs.append((label, Path(path), x, y))
        configs.append((label, config))
    if len(x_cols) > 1:
        raise ValueError(
            "some runs count env steps and some only iterations; compare runs of one kind"
        )
    x_label = axis_label(x_cols.pop())
    order = list(dict.fromkeys(label for label, *_ in runs))
    warnings = [
        line
        for label in order
        if (line := setting_mismatch(label, [c for lab, c in configs if lab == label]))
    ]
    for line in warnings:
        logger.warning(line)
    end = min(float(x[-1]) for _, _, x, _ in runs)
    grid = np.linspace(0.0, end, GRID_POINTS)
    curves = []
    for label, path, x, y in runs:
        values = np.interp(grid, x, y, left=np.nan)
        curves += [
            {"label": label, "run": str(path), "env_steps": s, metric: v}
            for s, v in zip(grid, values, strict=True)
        ]
    curve_frame = pd.DataFrame(curves)

    checkpoints = [end * (k + 1) / points for k in range(points)]
    unit = "steps" if x_label == "env steps" else "iterations"
    rows = []
    for label in order:
        mine = [(x, y) for lab, _, x, y in runs if lab == label]
        row: dict[str, Any] = {"label": label, "runs": len(mine)}
        for step in checkpoints:
            at = np.array([np.interp(step, x, y, left=np.nan) for x, y in mine])
            column = f"at {format_number(round(step))} {unit}"
            row[column] = float(np.nanmean(at))
            row[column + " (std)"] = float(np.nanstd(at)) if len(at) > 1 else math.nan
        rows.append(row)

    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    curve_frame.to_parquet(out / "compare_curves.parquet", index=False)
    title = (
        f"{axis_label(metric)}: mean over runs at equal env steps "
        f"(moving average of each run; std over runs)"
    )
    write_report("compare", rows, out, as_json=as_json, title=title)
    png = _plot(curve_frame, order, metric, x_label, out / "compare.png")
    if not as_json:
        print(f"wrote {png}, {out / 'compare_curves.parquet'}")
    return {
        "rows": rows,
        "png": png,
        "curves": out / "compare_curves.parquet",
        "warnings": warnings,
    }


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def setting_mismatch(label: str, configs: Sequence[dict[str, Any]]) -> str | None:
    """A warning when the runs of one label differ in a config key other than ``run.seed``
    (then their mean is not a mean over seeds of one setting); None when they do not."""
    flats = [_flat(c) for c in configs]
    keys = sorted(set().union(*flats) - {SEED_KEY}) if flats else []
    differing = []
    for key in keys:
        values = [repr(f.get(key)) for f in flats]
        if len(set(values)) > 1:
            differing.append(f"{key}: {' vs '.join(dict.fromkeys(values))}")
    if not differing:
        return None
    shown = "; ".join(differing[:5]) + (
        f"; and {len(differing) - 5} more" if len(differing) > 5 else ""
    )
    return (
        f"the {len(configs)} runs labelled {label!r} differ in more than {SEED_KEY} ({shown}), "
        "yet are averaged as seeds of one setting; give each run its own --label, or compare "
        "runs of one config"
    )


def _plot(frame: Any, order: list[str], metric: str, x_label: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label in order:
        mine = frame[frame["label"] == label].pivot(index="env_steps", columns="run", values=metric)
        x = mine.index.to_numpy()
        n = mine.shape[1]
        (line,) = ax.plot(x, mine.mean(axis=1), label=f"{label} ({n} run{'s' if n > 1 else ''})")
        if n > 1:
            ax.fill_between(
                x, mine.min(axis=1), mine.max(axis=1), color=line.get_color(), alpha=0.2
            )
    ax.set_xlabel(x_label)
    ax.set_ylabel(axis_label(metric))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(short_count))
    ax.set_title("mean over runs (band: lowest to highest run)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
