"""`memrl bench websearch` end to end (small settings) through the real CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[3]


def test_bench_writes_table_parquet_and_png(tmp_path):
    out = tmp_path / "bench"
    args = ["--pages", "2", "--starts", "1", "--settle-quiet-ms", "100", "--output", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "memrl", "bench", "websearch", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| pages_per_s | pool of 2 |" in proc.stdout
    frame = pd.read_parquet(out / "websearch.parquet")
    metrics = set(frame["metric"])
    assert {"browser_start_s", "memory_pss_mb", "pages_per_s", "cache_hit_speedup"} <= metrics
    assert (frame["value"] > 0).all()
    errors = frame.loc[frame["metric"] == "pages_per_s", "errors"].dropna()
    assert (errors == 0).all()
    assert (out / "websearch.png").stat().st_size > 0 and (out / "websearch.md").is_file()
