"""Runs written by memrl 0.1 (the layout before memrl/methods) still load, act and evaluate.

The fixtures under tests/fixtures/checkpoints were trained by the 0.1 code: their pickles name
classes by the old module paths (memrl.models.memo_rlmodule, memrl.learners.memo_ppo, ...).
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from memrl_testing import REPO, memrl_cli

from memrl.compat import MOVED

FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
MODULE = "checkpoints/iter_000001/learner_group/learner/rl_module/default_policy"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_module_path_imports_as_its_new_module(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_the_fixtures_really_name_old_paths() -> None:
    pickled = (FIXTURES / "memo_v0_1" / MODULE / "class_and_ctor_args.pkl").read_bytes()
    assert b"memrl.models.memo_rlmodule" in pickled


@pytest.mark.parametrize("run", ["memo_v0_1", "mlp_v0_1"])
def test_old_rl_module_checkpoint_acts_exactly_as_it_did(run: str) -> None:
    """The 0.1 code stepped each fixture through 12 observations of one trial and recorded the
    action logits (expected_actions.json); today's code must give the same ones: every weight
    loaded (RLlib loads with strict=False, so a renamed parameter would stay random)."""
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModule

    expected = json.loads((FIXTURES / "expected_actions.json").read_text())[run]
    module = RLModule.from_checkpoint(str(FIXTURES / run / MODULE))
    obs = torch.tensor(expected["obs"], dtype=torch.float32)
    logits = []
    with torch.no_grad():
        for t in range(len(obs)):
            batch = {Columns.OBS: obs[t : t + 1]}
            if run.startswith("memo"):
                batch["memo_trial_t"] = torch.tensor([t])
            logits.append(module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS][0])
    torch.testing.assert_close(
        torch.stack(logits), torch.tensor(expected["logits"]), rtol=1e-4, atol=1e-5
    )


@pytest.mark.slow
@pytest.mark.parametrize("run", ["memo_v0_1", "mlp_v0_1"])
def test_old_run_evaluates_through_the_cli(tmp_path: Path, run: str) -> None:
    copy = tmp_path / run
    shutil.copytree(FIXTURES / run, copy)
    out = tmp_path / "eval.json"
    proc = memrl_cli("eval", str(copy), "--episodes", "2", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 episodes" in proc.stdout and out.is_file()


@pytest.mark.slow
def test_old_memo_run_resumes_training_with_fresh_optimizer_state(tmp_path: Path) -> None:
    copy = tmp_path / "memo_v0_1"
    shutil.copytree(FIXTURES / "memo_v0_1", copy)
    proc = memrl_cli(
        "train", str(copy / "config.yaml"), "--output", str(copy), "--resume", "--stop-iters", "2"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "optimizer state does not fit this model" in proc.stdout + proc.stderr
    import pandas as pd

    rows = pd.read_parquet(copy / "metrics.parquet")
    assert rows["training_iteration"].tolist() == [1, 2]
