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


def test_a_setting_killed_for_memory_is_kept_as_a_row_and_the_rest_run(
    tmp_path, monkeypatch, capsys
):
    # Running out of memory cannot be caused safely here: the first setting's process fails as an
    # OOM-killed one would (exit -9); the second one is measured for real.
    real = mem1_memory._in_fresh_process

    def first_killed(setting):
        if setting["path"] == "full_logits":
            raise RuntimeError("the full_logits setting failed (exit -9: killed, ...)")
        return real(setting)

    monkeypatch.setattr(mem1_memory, "_in_fresh_process", first_killed)
    parser = argparse.ArgumentParser()
    mem1_memory.add_arguments(parser)
    args = parser.parse_args(
        ["--shape", "tiny", "--tokens", "128", "--minibatch", "2", "--threads", "1",
         "--paths", "full_logits", "default", "--json", "--output", str(tmp_path)]
    )  # fmt: skip
    assert mem1_memory.run(args) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out[captured.out.index("[") :])
    assert [r["path"] for r in rows] == ["full_logits", "default"]
    assert "exit -9" in rows[0]["error"] and rows[1]["peak_bytes"] >= 0
    assert "[1/2] full_logits, 2 x 128 tokens: FAILED" in captured.err
    assert len(pd.read_parquet(tmp_path / "mem1_memory.parquet")) == 2
