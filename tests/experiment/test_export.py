"""`memrl export`: each format loads back with its own library and acts as the trained policy."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from memrl_testing import memrl_cli

from memrl.experiment.export import export_checkpoint
from memrl.experiment.run_dir import POLICY_MODULE, STATE_FILE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"

LOAD_RLMODULE = """
import json, sys
import numpy as np, torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule
module = RLModule.from_checkpoint(sys.argv[1])
logits = None
if sys.argv[2] != "-":
    obs = torch.tensor(np.asarray(json.loads(sys.argv[2]), dtype=np.float32))
    with torch.no_grad():
        logits = module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS].tolist()
training = sorted(
    m for m in sys.modules
    if m.startswith("memrl.experiment") or m in ("memrl.methods.ppo", "memrl.methods.baselines")
    or m.startswith("memrl.") and m.endswith((".learner", ".settings", ".algorithm", ".batch"))
)
print(json.dumps({"logits": logits, "training": training, "class": type(module).__name__}))
"""


def _load_alone(path, obs="-"):
    """Loads an exported RLModule in a fresh interpreter; returns what it reports."""
    done = subprocess.run(
        [sys.executable, "-c", LOAD_RLMODULE, str(path), obs],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_memo_rlmodule_export_loads_without_the_training_code(tmp_path):
    run = tmp_path / "memo"
    shutil.copytree(FIXTURES / "memo_v0_1", run)
    loaded = _load_alone(export_checkpoint(run, "rlmodule", tmp_path / "policy"))
    assert loaded["class"] == "MemoRLModule" and loaded["training"] == []


def test_rlmodule_export_loads_without_the_training_code(tmp_path):
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModule

    run = tmp_path / "mlp"
    shutil.copytree(FIXTURES / "mlp_v0_1", run)
    out = export_checkpoint(run, "rlmodule", tmp_path / "policy")
    assert json.loads((out / "memrl_export.json").read_text())["format"] == "rlmodule"
    obs = [[0.25, 0.5, 0.0, 0.1] + [0.0] * 7, [0.0, 0.75, 1.0, 0.3] + [0.0] * 7]
    # A fresh interpreter that imports nothing of memrl's training code.
    loaded = _load_alone(out, json.dumps(obs))
    assert loaded["training"] == []
    (ckpt,) = sorted((run / "checkpoints").iterdir())[-1:]
    original = RLModule.from_checkpoint(str(ckpt / POLICY_MODULE))
    with torch.no_grad():
        expected = original.forward_inference({Columns.OBS: torch.tensor(obs)})
    torch.testing.assert_close(
        torch.tensor(loaded["logits"]), expected[Columns.ACTION_DIST_INPUTS].float()
    )


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory):
    """A run directory whose checkpoint holds a tiny LLM policy with trained LoRA adapters."""
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from memrl.envs.text import text_space
    from memrl.methods.mem1.prompts import PromptSettings
    from memrl.methods.mem1.rlmodule import LLMRLModule
    from memrl.methods.mem1.tiny import TinyModelSettings, build_tiny_model, build_tokenizer

    root = tmp_path_factory.mktemp("llm")
    torch.manual_seed(0)
    texts = ["Answer the questions. Paris is the capital of France. The tower is from 1889."] * 20
    tok = build_tokenizer(texts, 300, PromptSettings().all_tag_strings())
    base = build_tiny_model(len(tok), TinyModelSettings(hidden_size=32, intermediate_size=64))
    base.save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    config = {"path": str(root / "base"), "lora": {"enabled": True, "r": 2}, "value_head": True}
    space = text_space()
    module = RLModuleSpec(
        module_class=LLMRLModule, observation_space=space, action_space=space, model_config=config
    ).build()
    with torch.no_grad():  # "training" moved the adapters away from zero
        for name, p in module.named_parameters():
            if "lora_B" in name:
                p.add_(0.3)
    run = root / "run"
    ckpt = run / "checkpoints" / "iter_000001"
    module.save_to_path(str(ckpt / POLICY_MODULE))
    # A checkpoint counts once the algorithm's state file is there (export reads only the module).
    (ckpt / STATE_FILE).write_bytes(pickle.dumps({}))
    # The config that trains this module (export checks the checkpoint against it).
    run_config = {
        "name": "run",
        "env": {"id": "memrl/DocQA-v0", "config": {"synthetic_passages": 60, "objectives": 1}},
        "algorithm": {"name": "mem1"},
        "model": {"type": "llm", **config},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(run_config))
    ids = torch.tensor([tok("Paris is the capital")["input_ids"]])
    with torch.no_grad():
        trained = module.policy.lm(input_ids=ids).logits
        with module.policy.lm.disable_adapter():
            plain = module.policy.lm(input_ids=ids).logits
    assert (trained - plain).abs().max() > 1e-3
    return {"run": run, "base": root / "base", "ids": ids, "trained": trained}


def test_hf_export_merges_lora(tmp_path, llm_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = export_checkpoint(llm_run["run"], "hf", tmp_path / "hf")
    lm = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in name for name, _ in lm.named_parameters())
    with torch.no_grad():
        logits = lm(input_ids=llm_run["ids"]).logits
    torch.testing.assert_close(logits, llm_run["trained"], atol=1e-4, rtol=1e-4)
    assert AutoTokenizer.from_pretrained(out)("Paris is the capital")["input_ids"] == (
        llm_run["ids"][0].tolist()
    )


def test_lora_export_is_a_peft_adapter_of_the_base(tmp_path, llm_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = export_checkpoint(llm_run["run"], "lora", tmp_path / "lora")
    assert (out / "adapter_config.json").is_file()
    base = AutoModelForCausalLM.from_pretrained(llm_run["base"])
    lm = PeftModel.from_pretrained(base, out)
    with torch.no_grad():
        logits = lm(input_ids=llm_run["ids"]).logits
    torch.testing.assert_close(logits, llm_run["trained"], atol=1e-4, rtol=1e-4)


def test_export_errors_name_the_fix(tmp_path):
    run = tmp_path / "mlp"
    shutil.copytree(FIXTURES / "mlp_v0_1", run)
    with pytest.raises(ValueError, match="use --format rlmodule"):
        export_checkpoint(run, "hf", tmp_path / "out")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ValueError, match="is not empty"):
        export_checkpoint(run, "rlmodule", tmp_path / "full")
    out = memrl_cli("export", str(run), "--format", "onnx", "--output", str(tmp_path / "o"))
    assert out.returncode == 2 and "invalid choice: 'onnx'" in out.stderr
    out = memrl_cli("export", str(tmp_path / "nope"), "--format", "hf", "--output", "o")
    assert (
        out.returncode == 2 and out.stderr.startswith("error: ") and "does not exist" in out.stderr
    )
