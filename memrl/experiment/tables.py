"""What every benchmark writes: a printed table, a parquet file and a PNG plot.

A benchmark builds a list of flat row dicts (one measurement each) and hands them to
``write_report`` with the plots it wants; ``add_output_arguments`` gives every ``memrl bench``
command the same ``--output`` and ``--json`` flags.

Plots and tables are meant to be read without the code at hand: axes are labelled with what a
column measures and its unit (``axis_label``), legends say what a line is (``objectives = 8``),
axes over integer values have integer ticks, and every table cell goes through one number format
(``format_number``).
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Plot:
    """One panel of a benchmark's PNG."""

    x: str
    """Column on the x axis."""
    y: str
    """Column on the y axis."""
    group: str | None = None
    """Column whose values become separate lines (e.g. ``mode``)."""
    facet: str | None = None
    """Column whose values become separate panels (e.g. ``batch``)."""
    logx: bool = False
    """Log-scale x axis."""
    logy: bool = False
    """Log-scale y axis."""
    title: str | None = None
    """Panel title; defaults to ``y vs x``."""
    kind: str = "line"
    """``line`` (sorted by x, markers) or ``bar`` (one bar per x value and group)."""
    xlabel: str | None = None
    """x axis label; defaults to ``axis_label(x)``."""
    ylabel: str | None = None
    """y axis label; defaults to ``axis_label(y)``."""


LABELS: dict[str, str] = {
    "env_steps_sampled": "env steps",
    "env_steps": "env steps",
    "training_iteration": "training iteration",
    "episode_return_mean": "return per episode (mean)",
    "episode_len_mean": "episode length (steps)",
    "return_mean": "return per episode (mean)",
    "len_mean": "episode length (steps)",
    "inner_success_rate": "inner episodes reaching the goal (fraction)",
    "peak_tokens": "peak tokens in context",
    "dependency": "dependency (attention work, token pairs)",
    "mean_context_tokens": "context per turn (tokens)",
    "context_tokens": "context (tokens)",
    "generated_tokens": "generated (tokens)",
    "em": "exact match (fraction)",
    "f1": "F1 (fraction)",
    "steps_per_s": "env steps per second",
    "env_steps_per_s": "env steps per second",
    "time_total_s": "wall time (s)",
}
"""Axis labels of columns that many runs and benchmarks share."""

_UNIT_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("_per_s", " per second"),
    ("_ms", " (ms)"),
    ("_s", " (s)"),
    ("_mib", " (MiB)"),
    ("_mb", " (MiB)"),
    ("_gib", " (GiB)"),
    ("_gb", " (GiB)"),
    ("_bytes", " (bytes)"),
    ("_tokens", " (tokens)"),
    ("_pct", " (%)"),
)


def axis_label(column: str) -> str:
    """A readable axis label for a column: ``peak_mb`` -> ``peak (MiB)``, ``learner_s`` ->
    ``learner (s)``, ``env_steps_per_s`` -> ``env steps per second``; known columns (``LABELS``)
    get their own wording."""
    if column in LABELS:
        return LABELS[column]
    for suffix, unit in _UNIT_SUFFIXES:
        if column.endswith(suffix) and len(column) > len(suffix):
            return column[: -len(suffix)].replace("_", " ") + unit
    return column.replace("_", " ")


def legend_label(column: str, value: Any) -> str:
    """What a line of group ``column`` is: ``objectives = 8`` for a number, the value itself
    for a name (``memo``)."""
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return f"{column.replace('_', ' ')} = {format_number(value)}"
    return str(value)


def format_number(value: Any) -> str:
    """The one number format of tables: whole numbers with thousands separators (``160,000``),
    others with 4 significant digits (``0.1235``, ``12.35``), scientific notation only outside
    [1e-3, 1e6); NaN as ``nan``; anything else as ``str``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        return str(value)
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, int):
        return f"{value:,}"
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e6:
        digits = max(0, 3 - math.floor(math.log10(magnitude)))
        return f"{value:,.{digits}f}"
    return f"{value:.3e}"


def read_table(path: str | Path) -> Any:
    """A parquet file as a pandas frame, safe to read while another process replaces it.

    memrl writes its tables (a run's metrics.parquet after every iteration, a sweep's
    trials.parquet) to a temporary file renamed over the old one. A reader that opens the path more
    than once, as pandas and pyarrow do (its size first, then its bytes), can pair the old file's
    size with the new file's bytes and fail with "Page was smaller than expected". One open and
    one read get one version whole.

    Raises:
        ValueError: the file is not a parquet table (the message names it).
    """
    return frame_of_parquet(Path(path).read_bytes(), str(path))


def frame_of_parquet(data: bytes, source: str) -> Any:
    """The pandas frame of a parquet file's bytes (read from ``source``).

    Raises:
        ValueError: the bytes are not a parquet table (the message names ``source``).
    """
    import io

    import pandas as pd

    try:
        return pd.read_parquet(io.BytesIO(data))
    except (ValueError, OSError) as err:  # pyarrow's ArrowInvalid is a ValueError
        detail = " ".join(str(err).split())[:200]
        raise ValueError(f"{source} is not a readable parquet table ({detail})") from None


def add_output_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    """Adds ``--output DIR`` and ``--json`` to a benchmark's parser."""
    parser.add_argument(
        "--output",
        default=f"bench_out/{name}",
        help="directory for the table (.md), the parquet file and the PNG (default: %(default)s)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the rows as a JSON array instead of a table"
    )


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Renders rows as a GitHub-flavoured markdown table (numbers through ``format_number``)."""
    if not rows:
        return "(no rows)"
    cols = list(columns or _columns(rows))

    def cell(value: Any) -> str:
        return format_number(value)

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def write_report(
    name: str,
    rows: Sequence[dict[str, Any]],
    output_dir: str | Path,
    *,
    plots: Sequence[Plot] = (),
    as_json: bool = False,
    title: str | None = None,
    columns: Sequence[str] | None = None,
) -> Path:
    """Prints the rows and writes ``NAME.md``, ``NAME.parquet`` and ``NAME.png`` under output_dir.

    Returns:
        The output directory.
    """
    import pandas as pd

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = format_table(rows, columns)
    frame = pd.DataFrame(list(rows), columns=list(columns) if columns else None)
    frame.to_parquet(out / f"{name}.parquet", index=False)
    (out / f"{name}.md").write_text((f"# {title}\n\n" if title else "") + table + "\n")
    if plots and rows:
        _plot(frame, plots, out / f"{name}.png", title or name)
    if as_json:
        json.dump([_jsonable(r) for r in rows], sys.stdout, indent=1)
        print()
    else:
        if title:
            print(f"\n{title}")
        print(table)
        print(
            f"\nwrote {out / (name + '.parquet')}, {out / (name + '.md')}"
            + (f", {out / (name + '.png')}" if plots and rows else "")
        )
    return out


def _columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    cols: list[str] = []
    for row in rows:
        cols += [k for k in row if k not in cols]
    return cols


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if hasattr(v, "item"):
            v = v.item()
        out[k] = v
    return out


def _plot(frame: Any, plots: Sequence[Plot], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[Plot, Any, str]] = []
    for spec in plots:
        if spec.facet:
            for value, sub in frame.groupby(spec.facet, sort=True):
                panels.append((spec, sub, legend_label(spec.facet, _item(value))))
        else:
            panels.append((spec, frame, ""))
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False)
    for ax, (spec, sub, suffix) in zip(axes.flat, panels, strict=False):
        # Numbers in increasing order; names (modes, phases) in the order the rows give them.
        ordered = spec.group is not None and sub[spec.group].dtype.kind in "iufb"
        groups = sub.groupby(spec.group, sort=ordered) if spec.group else [(None, sub)]
        if spec.kind == "bar":
            labels = [format_number(_item(v)) for v in sub[spec.x].drop_duplicates()]
            group_list = list(groups)
            width = 0.8 / max(1, len(group_list))
            for i, (value, g) in enumerate(group_list):
                keys = [format_number(_item(v)) for v in g[spec.x]]
                heights = [g[spec.y][[k == lab for k in keys]].mean() for lab in labels]
                xs = [j + i * width for j in range(len(labels))]
                ax.bar(xs, heights, width, label=_line_label(spec.group, value))
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels, rotation=20)
        else:
            for value, g in groups:
                g = g.sort_values(spec.x)
                ax.plot(g[spec.x], g[spec.y], marker="o", label=_line_label(spec.group, value))
            if not spec.logx:
                integer_ticks(ax.xaxis, sub[spec.x])
        if spec.logx:
            ax.set_xscale("log")
        if spec.logy:
            ax.set_yscale("log")
        else:
            integer_ticks(ax.yaxis, sub[spec.y])
        ax.set_xlabel(spec.xlabel or axis_label(spec.x))
        ax.set_ylabel(spec.ylabel or axis_label(spec.y))
        name = spec.title or f"{axis_label(spec.y)} vs {axis_label(spec.x)}"
        ax.set_title(name + (f" ({suffix})" if suffix else ""), fontsize=10)
        ax.grid(alpha=0.3)
        if spec.group:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        fig.delaxes(ax)  # a grid cell with no panel is left blank, not drawn as empty axes
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def integer_ticks(axis: Any, values: Any) -> None:
    """Integer tick marks on an axis whose values are all whole numbers (steps, objectives)."""
    from matplotlib.ticker import MaxNLocator

    numbers_ = [_item(v) for v in values]
    if numbers_ and all(
        isinstance(v, numbers.Number)
        and not isinstance(v, bool)
        and math.isfinite(v)
        and float(v).is_integer()
        for v in numbers_
    ):
        axis.set_major_locator(MaxNLocator(integer=True))


def _line_label(group: str | None, value: Any) -> str | None:
    return None if group is None else legend_label(group, _item(value))


def _item(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
