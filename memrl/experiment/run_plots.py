"""The training curves of one run (metrics.parquet rows): curve.png and the report's figures.

Panels appear only for what the run logged, so no panel is empty: the return per trial; the
return of inner episode k (smoothed, with a band of one standard deviation over the smoothing
window; memory shows as later inner episodes above the first); the inner-episode success rate;
exact match and F1 (text agents, training rollouts and held-out evaluations); the memory figures
(peak tokens, context tokens per turn, dependency, KV-cache bytes); and the learner's loss and
policy entropy. The x axis is env steps, or training iterations when the run counts no env steps.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from memrl.experiment.tables import integer_ticks

INNER_SHOWN = 6
"""Inner-episode indices drawn one by one (later ones would only crowd the panel)."""


@dataclass(frozen=True)
class Panel:
    """One panel: lines (column, legend label) on a shared x axis."""

    title: str
    """Panel title."""
    ylabel: str
    """y axis label, with the unit."""
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(column, legend label) of each line."""
    smooth: bool = False
    """Draw a moving average with a one-standard-deviation band over the raw values."""


def x_axis(frame: Any) -> tuple[str, str]:
    """(column, label) of the x axis: env steps when they grow, else (and for text agents,
    whose env steps are turns) training iterations."""
    steps = frame.get("env_steps_sampled")
    if steps is not None and steps.nunique() > 1 and not is_text_run(frame):
        return "env_steps_sampled", "env steps"
    return "training_iteration", "training iteration"


def is_text_run(frame: Any) -> bool:
    """Whether the metrics are a text agent's (exact match or peak tokens per episode)."""
    return any(re.search(r"(^|_)(em|peak_tokens)$", c) for c in frame.columns)


def _present(frame: Any, column: str) -> bool:
    return column in frame and frame[column].notna().any()


def _matching(frame: Any, pattern: str) -> list[str]:
    regex = re.compile(pattern)
    return [c for c in frame.columns if regex.search(c) and _present(frame, c)]


def _pretty(column: str) -> str:
    """Legend label of a text or memory column: learner_eval_unseen_em -> held-out (unseen)."""
    name = column[len("learner_") :] if column.startswith("learner_") else column
    if name.startswith("eval_"):
        rest = name[len("eval_") :]
        where = ""
        for metric in _TEXT_METRICS:
            if rest.endswith("_" + metric):
                where = rest[: -len(metric) - 1]
                break
        return "held-out" + (f" ({where.replace('_', ' ')})" if where else "")
    if name.startswith("rollout_"):
        return "training rollouts"
    if name.startswith("memory_"):
        return name[len("memory_") :].replace("_", " ")
    return name.replace("_", " ")


_TEXT_METRICS = ("peak_tokens", "mean_context_tokens", "dependency", "em", "f1")

MEMORY_PANELS: tuple[tuple[str, str, str], ...] = (
    (r"peak_tokens$", "peak tokens in context", "tokens"),
    (r"(mean_)?context_tokens$", "context per turn", "tokens"),
    (r"dependency$", "dependency (attention work)", "token pairs"),
    (r"kv_bytes|kv_cache_bytes", "KV cache", "bytes"),
)
"""(column pattern, title, unit) of the memory figures a run may log."""


def training_panels(frame: Any) -> list[Panel]:
    """The panels this run's metrics can fill (see the module docstring)."""
    panels: list[Panel] = []
    if is_text_run(frame) and _present(frame, "learner_reward_mean"):
        # A text agent's reward per episode (its runner's episode_return_mean counts no reward).
        panels.append(
            Panel(
                "reward per episode (training rollouts)",
                "reward (mean per episode)",
                [("learner_reward_mean", "")],
            )
        )
    elif _present(frame, "episode_return_mean"):
        panels.append(
            Panel("return per trial", "return (mean per episode)", [("episode_return_mean", "")])
        )
    inner = sorted(
        (c for c in frame.columns if re.fullmatch(r"inner_return_\d+", c) and _present(frame, c)),
        key=lambda c: int(c.rsplit("_", 1)[1]),
    )[:INNER_SHOWN]
    if inner:
        lines = [(c, _inner_label(int(c.rsplit("_", 1)[1]))) for c in inner]
        panels.append(
            Panel("return of inner episode k within a trial", "return", lines, smooth=True)
        )
    if _present(frame, "inner_success_rate"):
        panels.append(
            Panel(
                "inner episodes reaching the goal",
                "success rate (fraction)",
                [("inner_success_rate", "")],
                smooth=True,
            )
        )
    for metric, title in (("em", "exact match"), ("f1", "F1")):
        cols = _matching(frame, rf"(^|_){metric}$")
        if cols:
            panels.append(
                Panel(title, f"{title} (fraction)", [(c, _pretty(c)) for c in sorted(cols)])
            )
    for pattern, title, unit in MEMORY_PANELS:
        cols = _matching(frame, pattern)
        if cols:
            panels.append(Panel(title, unit, [(c, _pretty(c)) for c in cols]))
    if _present(frame, "learner_total_loss"):
        panels.append(Panel("learner loss", "total loss", [("learner_total_loss", "")]))
    if _present(frame, "learner_entropy"):
        panels.append(Panel("policy entropy", "entropy (nats)", [("learner_entropy", "")]))
    return panels


def _inner_label(k: int) -> str:
    return f"inner episode {k + 1}" + (" (first)" if k == 0 else "")


def short_count(value: float, _pos: Any = None) -> str:
    """Tick label of a count: 160000 -> 160k, 2500000 -> 2.5M."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def smoothing_window(n: int) -> int:
    """Points averaged by the moving average: about a fifteenth of the run, at least 1."""
    return max(1, round(n / 15))


def draw_training(frame: Any, title: str) -> Any:
    """A matplotlib Figure with the run's panels (None when the run has no rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    if frame is None or len(frame) == 0:
        return None
    panels = training_panels(frame)
    if not panels:
        return None
    x_col, x_label = x_axis(frame)
    frame = frame.sort_values(x_col)
    x = frame[x_col].to_numpy()
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, 3.5 * nrows), squeeze=False)
    window = smoothing_window(len(frame))
    colors = plt.get_cmap("viridis")
    for ax, panel in zip(axes.flat, panels, strict=False):
        for n, (column, label) in enumerate(panel.lines):
            y = frame[column].astype(float)
            # Metrics logged every few iterations (held-out evaluations) are joined across gaps.
            keep = y.notna().to_numpy()
            y, xs = y[keep], x[keep]
            color = None
            if len(panel.lines) > 1:  # the first line stands out; the others shade in order
                shade = (n - 1) / max(1, len(panel.lines) - 2) * 0.85
                color = "tab:red" if n == 0 else colors(shade)
            marker = "o" if len(frame) < 20 else None
            if panel.smooth and window > 1:
                mean = y.rolling(window, min_periods=1).mean().to_numpy()
                std = y.rolling(window, min_periods=1).std().fillna(0.0).to_numpy()
                (line,) = ax.plot(xs, mean, color=color, label=label or None, marker=marker)
                ax.fill_between(xs, mean - std, mean + std, color=line.get_color(), alpha=0.15)
            else:
                ax.plot(xs, y.to_numpy(), color=color, label=label or None, marker=marker)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(x_label)
        ax.set_ylabel(panel.ylabel)
        integer_ticks(ax.xaxis, frame[x_col])
        if x_col == "env_steps_sampled":
            ax.xaxis.set_major_formatter(FuncFormatter(short_count))
        ax.grid(alpha=0.3)
        if any(label for _, label in panel.lines):
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        fig.delaxes(ax)
    smoothing = f" (smoothed over {window} iterations, band: ±1 std)" if window > 1 else ""
    fig.suptitle(title + (smoothing if any(p.smooth for p in panels) else ""), fontsize=11)
    fig.tight_layout()
    return fig


def save_figure(fig: Any, path: str | Path | BinaryIO, dpi: int = 110) -> None:
    """Writes the figure as a PNG to a path or a binary file, and closes it."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=dpi, format="png")
    plt.close(fig)


def figure_svg(fig: Any) -> str:
    """The figure as an inline SVG element (text kept as text, so it stays small and sharp)."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def plot_training_png(rows: list[dict[str, Any]], path: str | Path | BinaryIO, title: str) -> bool:
    """Writes curve.png from metrics rows; returns False (and writes nothing) with no panels."""
    import pandas as pd

    fig = draw_training(pd.DataFrame(rows), title)
    if fig is None:
        return False
    save_figure(fig, path)
    return True
