"""What every benchmark writes: a printed table, a parquet file and a PNG plot.

A benchmark builds a list of flat row dicts (one measurement each) and hands them to
``write_report`` with the plots it wants; ``add_output_arguments`` gives every ``memrl bench``
command the same ``--output`` and ``--json`` flags.
"""

from __future__ import annotations

import argparse
import json
import math
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
    """Renders rows as a GitHub-flavoured markdown table (floats to 4 significant digits)."""
    if not rows:
        return "(no rows)"
    cols = list(columns or _columns(rows))

    def cell(value: Any) -> str:
        if isinstance(value, float):
            if math.isnan(value):
                return "nan"
            return f"{value:.4g}"
        return str(value)

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
                panels.append((spec, sub, f"{spec.facet}={value}"))
        else:
            panels.append((spec, frame, ""))
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False)
    for ax, (spec, sub, suffix) in zip(axes.flat, panels, strict=False):
        groups = sub.groupby(spec.group, sort=True) if spec.group else [(None, sub)]
        if spec.kind == "bar":
            labels = [str(v) for v in sub[spec.x].drop_duplicates()]
            group_list = list(groups)
            width = 0.8 / max(1, len(group_list))
            for i, (value, g) in enumerate(group_list):
                heights = [g.loc[g[spec.x].astype(str) == lab, spec.y].mean() for lab in labels]
                xs = [j + i * width for j in range(len(labels))]
                ax.bar(xs, heights, width, label=None if value is None else str(value))
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))], labels, rotation=20)
        else:
            for value, g in groups:
                g = g.sort_values(spec.x)
                ax.plot(
                    g[spec.x], g[spec.y], marker="o", label=None if value is None else str(value)
                )
        if spec.logx:
            ax.set_xscale("log")
        if spec.logy:
            ax.set_yscale("log")
        ax.set_xlabel(spec.x)
        ax.set_ylabel(spec.y)
        ax.set_title((spec.title or f"{spec.y} vs {spec.x}") + (f" ({suffix})" if suffix else ""))
        ax.grid(alpha=0.3)
        if spec.group:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
