"""`memrl bench mem1-memory` on a tiny shape: both paths measured as the benchmark measures them,
the rows the JSON output promises (the figures themselves are for the benchmark to report)."""

from __future__ import annotations

import argparse
import json

import pandas as pd
import pytest
from memrl_testing import memrl_cli

from memrl.bench import mem1_memory


def test_one_setting_per_path(tmp_path):
    mem1_memory.write_model(tmp_path, mem1_memory.SHAPES["tiny"])
    rows = []
    for path in mem1_memory.PATHS:
        setting = {
            "model_dir": str(tmp_path), "vocab": 512, "path": path, "tokens": 128,
            "minibatch": 2, "micro_batch_tokens": 128, "chunk": 32, "threads": 1,
        }  # fmt: skip
        rows.append(mem1_memory.measure(setting))
    for row in rows:
        assert row["tokens"] == 128 and row["minibatch"] == 2
        assert isinstance(row["peak_bytes"], int) and row["peak_bytes"] >= 0
    by_path = {r["path"]: r for r in rows}
    assert by_path["default"]["micro_batches"] == 2  # 128-token budget: one row per pass
    assert by_path["full_logits"]["micro_batches"] == 1  # the whole minibatch at once


def test_full_logits_settings_over_the_cap_are_skipped(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    mem1_memory.add_arguments(parser)
    args = parser.parse_args(
        ["--shape", "tiny", "--tokens", "64", "--minibatch", "2", "--paths", "full_logits",
         "--full-logits-max-tokens", "100", "--json", "--output", str(tmp_path)]
    )  # fmt: skip
    assert mem1_memory.run(args) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.slow
def test_cli_runs_each_setting_in_a_fresh_process(tmp_path):
    out = memrl_cli(
        "bench", "mem1-memory", "--shape", "tiny", "--tokens", "128", "--minibatch", "2",
        "--threads", "1", "--json", "--output", str(tmp_path), timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout[out.stdout.index("[") :])
    assert [r["path"] for r in rows] == ["default", "full_logits"]
    assert {"path", "tokens", "minibatch", "peak_bytes"} <= set(rows[0])
    frame = pd.read_parquet(tmp_path / "mem1_memory.parquet")
    assert len(frame) == 2 and (tmp_path / "mem1_memory.png").is_file()
