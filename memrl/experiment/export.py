"""`memrl export CHECKPOINT --format hf|lora|rlmodule --output DIR`: a trained policy on its own.

- ``rlmodule``: the policy's RLModule checkpoint, which ``RLModule.from_checkpoint(DIR)`` loads
  with Ray alone: no Algorithm, no learner, no memrl config (the module's own class must be
  importable, e.g. memrl's Memo network); for Memo, FCT, RMT, LSTM and MLP policies;
- ``hf``: a Hugging Face model folder of an LLM policy (MEM1 or full context), LoRA adapters
  merged into the weights, with its tokenizer; ``AutoModelForCausalLM.from_pretrained(DIR)``
  loads it;
- ``lora``: the LoRA adapters of an LLM policy as a peft adapter folder (with the tokenizer), to
  put on its base model with ``PeftModel.from_pretrained(base, DIR)``.

The value head of a PPO-trained LLM (a training aid) is not exported. ``memrl_export.json`` in
the folder says what was exported from where.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from memrl.experiment.run_dir import CHECKPOINTS, POLICY_MODULE, policy_module_dir
from memrl.extras import require

logger = logging.getLogger(__name__)

FORMATS = ("hf", "lora", "rlmodule")


def export_checkpoint(
    checkpoint: str | Path, fmt: str, output: str | Path, echo: Any = print
) -> Path:
    """Exports a checkpoint (or a run directory's newest intact one); returns the output folder.

    The checkpoint is checked against the run's config first (checkpoint_check.py); ``echo``
    says when a damaged newest checkpoint is passed over for an older one.

    Raises:
        ValueError: unknown format, an output folder that is not empty, a format the policy
            does not have (hf/lora of a non-LLM policy, lora without adapters), a damaged
            checkpoint or one that does not fit the run's config.
        FileNotFoundError: no such checkpoint.
    """
    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.checkpoint_check import check_checkpoint
    from memrl.experiment.config import parse_config
    from memrl.experiment.evaluate import open_checkpoint, shown_checkpoint

    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {list(FORMATS)}, got {fmt!r}")
    out = Path(output)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"--output {out} is not empty; give a new or empty folder")
    with open_checkpoint(checkpoint, echo) as (run, ckpt):
        exp = parse_config(run.read_config()).located(run.path)
        check_checkpoint(ckpt, exp, build_algorithm_config(exp), shown_checkpoint(run, ckpt))
        return _export(run, ckpt, fmt, out)


def _export(run: Any, ckpt: Path, fmt: str, out: Path) -> Path:
    module_dir = policy_module_dir(ckpt)
    if not module_dir.is_dir():
        raise FileNotFoundError(f"{ckpt} has no policy module at {POLICY_MODULE}")
    if fmt == "rlmodule":
        if out.exists():
            out.rmdir()
        shutil.copytree(module_dir, out)
    else:
        _export_lm(module_dir, fmt, out)
    if run.staged:  # a run on a storage URI, copied locally for the export
        where = {"checkpoint": run.uri(CHECKPOINTS, ckpt.name), "run": run.location}
    else:
        where = {"checkpoint": str(ckpt.resolve()), "run": str(run.path)}
    (out / "memrl_export.json").write_text(json.dumps({"format": fmt, **where}))
    return out


def _export_lm(module_dir: Path, fmt: str, out: Path) -> None:
    require("transformers", f"memrl export --format {fmt}")
    from ray.rllib.core.rl_module.rl_module import RLModule

    module = RLModule.from_checkpoint(str(module_dir))
    lm: Any = getattr(getattr(module, "policy", None), "lm", None)
    tokenizer = getattr(module, "tokenizer", None)
    if lm is None or tokenizer is None:
        raise ValueError(
            f"--format {fmt} needs an LLM policy (model.type llm); this checkpoint holds a "
            f"{type(module).__name__}: use --format rlmodule"
        )
    adapters = hasattr(lm, "merge_and_unload")  # a peft model: LoRA adapters on a base model
    if fmt == "lora":
        if not adapters:
            raise ValueError(
                "--format lora needs LoRA adapters, but this policy was trained without them "
                "(model.lora.enabled false): use --format hf"
            )
        lm.save_pretrained(str(out))
    else:
        if adapters:
            lm = lm.merge_and_unload()
        lm.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
