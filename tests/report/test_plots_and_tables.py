"""Benchmark tables and plots a person can read: units on axes, legends that say what a line is,
integer ticks for counts, no empty panels, one number format."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from memrl.experiment import tables  # noqa: E402
from memrl.experiment.tables import (  # noqa: E402
    Plot,
    axis_label,
    format_number,
    format_table,
    integer_ticks,
    legend_label,
)


def test_one_number_format():
    assert format_number(160000) == "160,000"
    assert format_number(160000.0) == "160,000"
    assert format_number(0.123456) == "0.1235"
    assert format_number(12.3456) == "12.35"
    assert format_number(1234.56) == "1,235"
    assert format_number(0.000123) == "1.230e-04"
    assert format_number(2.5e7 + 0.5) == "2.500e+07"
    assert format_number(float("nan")) == "nan"
    assert format_number(True) == "True" and format_number("memo") == "memo"
    table = format_table([{"mode": "memo", "steps": 4000.0, "return": 0.51234}])
    assert table.splitlines()[2] == "| memo | 4,000 | 0.5123 |"


def test_axis_labels_name_the_unit():
    assert axis_label("peak_mb") == "peak (MiB)"
    assert axis_label("learner_s") == "learner (s)"
    assert axis_label("env_steps_per_s") == "env steps per second"
    assert axis_label("kv_bytes") == "kv (bytes)"
    assert axis_label("env_steps_sampled") == "env steps"
    assert axis_label("peak_tokens") == "peak tokens in context"
    assert axis_label("objectives") == "objectives"


def test_legends_say_what_a_line_is():
    assert legend_label("objectives", 8) == "objectives = 8"
    assert legend_label("lr", 0.0003) == "lr = 3.000e-04"
    assert legend_label("mode", "memo") == "memo"


def test_integer_ticks_only_for_whole_numbers():
    fig, ax = plt.subplots()
    integer_ticks(ax.xaxis, [1, 2, 4.0, 8])
    assert all(float(t).is_integer() for t in ax.xaxis.get_major_locator().tick_values(0, 2))
    integer_ticks(ax.yaxis, [0.5, 1.0])
    assert not all(float(t).is_integer() for t in ax.yaxis.get_major_locator().tick_values(0, 2))
    plt.close(fig)


def test_benchmark_png_has_no_empty_panels_and_readable_labels(tmp_path, monkeypatch):
    seen = {}
    real_savefig = plt.Figure.savefig

    def keep(fig, *args, **kwargs):  # look at the figure write_report draws, then save it
        seen["fig"] = fig
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    rows = [
        {"objectives": n, "series": s, "peak_tokens": n * k, "batch": b}
        for n in (1, 2, 4, 8)
        for s, k in (("mem1", 10), ("full", 100))
        for b in (1, 2)
    ]
    tables.write_report(
        "t",
        rows,
        tmp_path,
        plots=[
            Plot(x="objectives", y="peak_tokens", group="series", facet="batch"),
            Plot(x="objectives", y="peak_tokens", group="batch"),
        ],
    )
    fig = seen["fig"]
    assert len(fig.axes) == 3  # 3 panels in a 3-wide grid: nothing empty drawn
    first = fig.axes[0]
    assert first.get_xlabel() == "objectives" and first.get_ylabel() == "peak tokens in context"
    assert first.get_title() == "peak tokens in context vs objectives (batch = 1)"
    assert sorted(t.get_text() for t in first.get_legend().get_texts()) == ["full", "mem1"]
    legend = [t.get_text() for t in fig.axes[2].get_legend().get_texts()]
    assert legend == ["batch = 1", "batch = 2"]
    ticks = first.xaxis.get_major_locator().tick_values(1, 8)
    assert all(math.isclose(t, round(t)) for t in ticks)
    assert (tmp_path / "t.png").stat().st_size > 0
