"""Checkpoints are checked before use: `memrl eval`, `train --resume` and `export` refuse one whose
policy module is not the run's (RLlib would skip the weights that do not fit and act with random
ones) and one with a damaged file, in one ``error:`` line; a run whose newest checkpoint is
damaged falls back to the newest intact one, and says so.

The runs are copies of the 0.1 fixtures (tests/fixtures/checkpoints): real RLlib checkpoints.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from memrl_testing import REPO, cli_error_line, memrl_cli

from memrl.experiment.run_dir import POLICY_MODULE, STATE_FILE
from memrl.experiment.state_files import weight_shapes

FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
MODULE_STATE = f"{POLICY_MODULE}/module_state.pkl"


def _run(tmp_path: Path, weights: str = "mlp_v0_1", config: str | None = None) -> Path:
    """A copy of a fixture run with the checkpoint of ``weights`` and the config of ``config``
    (default: its own)."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / weights, run)
    if config is not None:
        shutil.copy(FIXTURES / config / "config.yaml", run / "config.yaml")
    return run


def _edit_config(run: Path, section: str, **values: object) -> None:
    data = yaml.safe_load((run / "config.yaml").read_text())
    data[section].update(values)
    (run / "config.yaml").write_text(yaml.safe_dump(data))


def _second_checkpoint(run: Path) -> Path:
    """Copies the run's iter_000001 to iter_000002 (a newer checkpoint to damage)."""
    newer = run / "checkpoints" / "iter_000002"
    shutil.copytree(run / "checkpoints" / "iter_000001", newer)
    return newer


def test_eval_refuses_the_checkpoint_of_another_model(tmp_path, capsys):
    """An MLP checkpoint in a Memo run: refused before anything is evaluated or written."""
    run = _run(tmp_path, weights="mlp_v0_1", config="memo_v0_1")
    err = cli_error_line(capsys, "eval", str(run), "--episodes", "1")
    assert f"{run}/checkpoints/iter_000001 does not fit the model of the run's config" in err
    assert "module class ray.rllib" in err and "DefaultPPOTorchRLModule" in err
    assert "(config: memrl.methods.memo.rlmodule.MemoRLModule)" in err
    assert "weight(s) of the config's module missing: encoder.0.weight" in err
    assert not (run / "eval").exists() and not (run / "report.html").exists()


def test_resume_refuses_the_checkpoint_of_another_model(tmp_path, capsys):
    run = _run(tmp_path, weights="memo_v0_1", config="mlp_v0_1")
    rows = pd.read_parquet(run / "metrics.parquet")
    err = cli_error_line(
        capsys, "train", str(run / "config.yaml"), "--output", str(run), "--resume"
    )
    assert "does not fit the model of the run's config (model.type mlp)" in err
    assert "module class memrl.methods.memo.rlmodule.MemoRLModule" in err
    assert not (run / "rllib").exists()  # refused before Ray or the algorithm started
    pd.testing.assert_frame_equal(pd.read_parquet(run / "metrics.parquet"), rows)


@pytest.mark.parametrize(
    "section, values, expected",
    [
        ("model", {"d_model": 32}, "another shape: encoder.2.weight (16, 16) (config: (32, 16))"),
        ("model", {"n_layers": 2}, "weight(s) of the config's module missing: net.blocks.1."),
        (
            "env",
            {"id": "memrl/MemoryCorridor-v0", "config": {}},
            "observation space Box(-1.0, 1.0, (11,), float32) (config: Box(-1.0, 1.0, (7,)",
        ),
    ],
    ids=["wider", "deeper", "other-env"],
)
def test_export_refuses_a_checkpoint_of_another_shape(tmp_path, capsys, section, values, expected):
    run = _run(tmp_path, weights="memo_v0_1")
    _edit_config(run, section, **values)
    out = tmp_path / "out"
    err = cli_error_line(capsys, "export", str(run), "--format", "rlmodule", "--output", str(out))
    assert "does not fit the model of the run's config (model.type memo)" in err
    assert expected in err and not out.exists()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_weight_shapes_of_numpy_and_torch_states(tmp_path, protocol):
    """What RLlib's module states hold: numpy arrays (TorchRLModule), torch tensors in their own
    dtype (memrl's LLM policy), numbers for 0-d weights; every pickle protocol."""
    import pickle

    import numpy as np
    import torch

    state = {
        "w": np.zeros((300, 400), np.float32),
        "b": torch.zeros(7, dtype=torch.bfloat16),
        "p": torch.nn.Parameter(torch.ones(2, 3)),
        "t": 1.5,
    }
    path = tmp_path / "module_state.pkl"
    path.write_bytes(pickle.dumps(state, protocol=protocol))
    assert weight_shapes(path) == {"w": (300, 400), "b": (7,), "p": (2, 3), "t": ()}
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(ValueError, match="is cut short or corrupt"):
        weight_shapes(path)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _make_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    "damage, problem",
    [
        (_truncate, "is cut short or corrupt"),
        (_make_folder, "is a folder where a file should be"),
        (lambda p: p.write_bytes(b""), "is empty"),
    ],
    ids=["truncated", "folder", "empty"],
)
def test_a_damaged_module_state_is_one_error_line_naming_it(tmp_path, capsys, damage, problem):
    run = _run(tmp_path)
    damage(run / "checkpoints" / "iter_000001" / MODULE_STATE)
    err = cli_error_line(capsys, "eval", str(run), "--episodes", "1")
    damaged = run / "checkpoints" / "iter_000001" / MODULE_STATE
    assert f"error: {damaged} {problem}" in err and "the checkpoint is damaged" in err
    assert "no checkpoint yet" not in err


def test_damaged_files_of_a_named_checkpoint_are_named(tmp_path, capsys):
    run = _run(tmp_path)
    ckpt = run / "checkpoints" / "iter_000001"
    (ckpt / "learner_group" / "learner" / "metadata.json").write_text('{"ray_version": ')
    err = cli_error_line(capsys, "eval", str(ckpt), "--episodes", "1")
    assert f"{ckpt}/learner_group/learner/metadata.json is not valid JSON" in err
    (ckpt / "learner_group" / "learner" / "metadata.json").write_text("{}")
    _make_folder(ckpt / STATE_FILE)
    err = cli_error_line(capsys, "eval", str(ckpt), "--episodes", "1")
    assert f"{ckpt}/{STATE_FILE} is a folder where a file should be" in err


def test_a_damaged_newest_checkpoint_falls_back_to_an_intact_one_and_says_so(tmp_path, capsys):
    from memrl.cli import main

    run = _run(tmp_path)
    newer = _second_checkpoint(run)
    _truncate(newer / MODULE_STATE)
    out = tmp_path / "policy"
    assert main(["export", str(run), "--format", "rlmodule", "--output", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"{newer / MODULE_STATE} is cut short or corrupt (pickle exhausted before end of frame): "
        "the checkpoint is damaged; using iter_000001 instead, the newest intact checkpoint"
    )
    exported = json.loads((out / "memrl_export.json").read_text())
    assert exported["checkpoint"] == str((run / "checkpoints" / "iter_000001").resolve())
    # With the older one damaged too, nothing is left to fall back to.
    (run / "checkpoints" / "iter_000001" / MODULE_STATE).write_bytes(b"")
    err = cli_error_line(capsys, "export", str(run), "--format", "rlmodule", "--output", "o")
    assert f"{newer / MODULE_STATE} is cut short" in err
    assert err.rstrip().endswith("and so are the run's older checkpoints")


@pytest.mark.slow
def test_resume_continues_from_the_newest_intact_checkpoint(tmp_path):
    run = _run(tmp_path)
    newer = _second_checkpoint(run)
    (newer / MODULE_STATE).write_bytes(b"")
    proc = memrl_cli(
        "train", str(run / "config.yaml"), "--output", str(run), "--resume", "--stop-iters", "2"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{newer / MODULE_STATE} is empty: the checkpoint is damaged; using iter_000001" in (
        proc.stdout
    )
    assert f"resuming from {run}/checkpoints/iter_000001 (iteration 1)" in proc.stdout
    rows = pd.read_parquet(run / "metrics.parquet")
    assert rows["training_iteration"].tolist() == [1, 2]
