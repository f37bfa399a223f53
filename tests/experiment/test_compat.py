"""Runs written by memrl 0.1 (the layout before memrl/methods) still load, act and evaluate.

The fixtures under tests/fixtures/checkpoints were trained by the 0.1 code: their pickles name
classes by the old module paths (memrl.models.memo_rlmodule, memrl.learners.memo_ppo, ...).
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import numpy as np
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
def test_old_rl_module_checkpoint_loads_and_acts(run: str) -> None:
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModule

    module = RLModule.from_checkpoint(str(FIXTURES / run / MODULE))
    obs = torch.as_tensor(
        np.stack([module.observation_space.sample() for _ in range(3)]), dtype=torch.float32
    )
    batch = {Columns.OBS: obs}
    if run.startswith("memo"):
        batch["memo_trial_t"] = torch.zeros(3, dtype=torch.long)
    with torch.no_grad():
        out = module.forward_inference(batch)
    logits = out[Columns.ACTION_DIST_INPUTS]
    assert logits.shape == (3, module.action_space.n) and torch.isfinite(logits).all()


@pytest.mark.slow
@pytest.mark.parametrize("run", ["memo_v0_1", "mlp_v0_1"])
def test_old_run_evaluates_through_the_cli(tmp_path: Path, run: str) -> None:
    copy = tmp_path / run
    shutil.copytree(FIXTURES / run, copy)
    out = tmp_path / "eval.json"
    proc = memrl_cli("eval", str(copy), "--episodes", "2", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 episodes" in proc.stdout and out.is_file()
