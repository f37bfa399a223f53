"""memrl bench memo-memory / memo-train-cost on tiny models: rows, files and cache figures."""

from __future__ import annotations

import argparse
import json

import pandas as pd
import pytest
import torch

from memrl.bench import memo_memory, memo_train_cost

torch.set_num_threads(1)  # small shared machines: one thread per test process


def _args(module, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def test_memo_memory_rows_and_outputs(tmp_path, capsys):
    out = tmp_path / "mm"
    argv = [
        "--t",
        "64,128",
        "--batch",
        "1,3",
        "--d-model",
        "16",
        "--n-heads",
        "2",
        "--n-layers",
        "1",
        "--l-seg",
        "16",
        "--l-sum",
        "2",
        "--fct-steps",
        "2",
        "--modes",
        "memo,rmt,fct,memo-stream",
        "--stream-blocks",
        "2",
        "--output",
        str(out),
        "--json",
    ]
    assert memo_memory.run(_args(memo_memory, argv)) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2 * 2 * 4
    by = {(r["mode"], r["t"], r["batch"]): r for r in rows}
    # After t steps: memo holds t/l_seg summary blocks of l_sum; rmt one; fct every step.
    assert by[("memo", 128, 3)]["cache_tokens"] == 128 // 16 * 2
    assert by[("rmt", 128, 3)]["cache_tokens"] == 2
    assert by[("fct", 128, 3)]["cache_tokens"] == 128
    assert by[("memo-stream", 128, 3)]["cache_tokens"] == 2 * 2
    assert by[("fct", 64, 1)]["cache_bytes"] == 64 * 1 * 2 * 16 * 4
    assert by[("memo", 128, 1)]["bytes_vs_fct"] == pytest.approx(16 / 128)
    assert all(r["step_ms"] > 0 and r["step_cpu_ms"] > 0 for r in rows)
    frame = pd.read_parquet(out / "memo-memory.parquet")
    assert {"mode", "t", "batch", "cache_tokens", "cache_bytes", "step_ms", "step_cpu_ms"} <= set(
        frame.columns
    )
    assert (out / "memo-memory.png").stat().st_size > 0


def test_memo_memory_rejects_unknown_mode(tmp_path):
    args = _args(memo_memory, ["--modes", "memo,gru", "--output", str(tmp_path)])
    with pytest.raises(ValueError, match="gru"):
        memo_memory.run(args)


def test_memo_train_cost_learner_part(tmp_path):
    argv = [
        "--trial-len",
        "40",
        "--d-model",
        "16",
        "--n-heads",
        "2",
        "--n-layers",
        "1",
        "--l-seg",
        "8",
        "--l-sum",
        "2",
        "--output",
        str(tmp_path),
    ]
    assert memo_train_cost.run(_args(memo_train_cost, argv)) == 0
    frame = pd.read_parquet(tmp_path / "memo-train-cost.parquet")
    assert sorted(frame["mode"]) == ["fct", "memo"]
    assert (frame["learner_s"] >= frame["forward_s"]).all() and (frame["peak_mb"] > -1).all()
