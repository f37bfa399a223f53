"""``LLMRLModule``: the RLlib adapter of ``TokenPolicy``; ``load_policy`` gets a trained one back.

``TokenPolicy`` (memrl/methods/mem1/network.py) is a Hugging Face causal LM with optional LoRA and a
value head for PPO. Learners call ``forward_train`` on rows of packed token sequences; env runners
build the module with ``inference_only=True`` (no value head) and generate through a backend
(``memrl.methods.mem1.generation``). Weight syncs carry the LM weights (LoRA: only the adapters).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule

from memrl.methods.mem1.generation.base import GenerationSettings
from memrl.methods.mem1.network import (
    DEFAULT_LOGP_CHUNK_TOKENS,
    LoRASettings,
    TokenPolicy,
    load_lm,
    load_tokenizer,
    resolve_compute_dtype,
    resolve_dtype,
)

# Batch columns of token batches (one row = one or more packed sequences).
INPUT_IDS = "input_ids"  # (B, T) int64 token ids
POSITION_IDS = "position_ids"  # (B, T) int64 rollout positions
SEG = "seg"  # (B, T) int64 segment of each token
VIS = "vis"  # (B, S, S) bool segment visibility
LOSS_MASK = "loss_mask"  # (B, T) bool generated tokens: the only log-probs a loss reads


class LLMRLModule(TorchRLModule, InferenceOnlyAPI):
    """A causal LM policy: ``forward_train`` scores packed token rows (log-probs, values).

    ``model_config``: ``path`` (model directory or name), ``dtype``, ``compute_dtype``,
    ``lora`` (LoRASettings as a dict), ``value_head`` (bool), ``logp_chunk_tokens``,
    ``full_logits``,
    ``activation_checkpointing``, ``freeze_layers`` (see ``LLMModelSettings``), ``generation``
    (GenerationSettings as a dict, for env runners).
    """

    def setup(self) -> None:
        cfg = self.model_config
        self.tokenizer = load_tokenizer(cfg["path"])
        lora = LoRASettings(**cfg.get("lora", {}))
        self.lora_enabled = lora.enabled
        lm = load_lm(
            cfg["path"],
            resolve_dtype(cfg.get("dtype", "auto")),
            lora,
            activation_checkpointing=bool(cfg.get("activation_checkpointing", False))
            and not self.inference_only,
            freeze_layers=int(cfg.get("freeze_layers", 0)),
        )
        value_head = bool(cfg.get("value_head")) and not self.inference_only
        self.policy = TokenPolicy(
            lm,
            value_head=value_head,
            logp_chunk_tokens=int(cfg.get("logp_chunk_tokens", DEFAULT_LOGP_CHUNK_TOKENS)),
            full_logits=bool(cfg.get("full_logits", False)),
            compute_dtype=resolve_compute_dtype(cfg.get("compute_dtype", "auto")),
            temperature=GenerationSettings(**cfg.get("generation", {})).training_temperature,
        )
        self._full_state: dict[str, Any] | None = None

    def get_non_inference_attributes(self) -> list[str]:
        return ["policy.value_head"]

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self.policy.score(batch[INPUT_IDS], batch[POSITION_IDS], batch[SEG], batch[VIS])

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self.policy.score(
            batch[INPUT_IDS],
            batch[POSITION_IDS],
            batch[SEG],
            batch[VIS],
            with_values=self.policy.value_head is not None,
            logp_mask=batch.get(LOSS_MASK),
        )

    def keep_full_state(self, state: dict[str, Any] | None) -> None:
        """FSDP learners: the gathered full weights that ``get_state`` hands out (None on all but
        the first learner)."""
        self._full_state = state

    def _sharded(self) -> bool:
        return any(hasattr(p, "device_mesh") for p in self.policy.parameters())

    def get_state(self, components=None, *, not_components=None, inference_only=False, **kwargs):
        """The module's weights as CPU tensors in their own dtype (bf16 stays bf16: numpy, which
        RLlib's default state uses, has no bf16); ``inference_only`` drops the value head, and
        with LoRA keeps only the adapters (env runners load the same base weights)."""
        if self._sharded():
            if self._full_state is None:
                raise RuntimeError(
                    "this FSDP learner holds a shard of the weights; the first learner hands "
                    "out the full state (gathered after every update)"
                )
            state = dict(self._full_state)
        else:
            state = self.state_dict()
        if inference_only and not self.inference_only:
            drop = tuple(f"{a}." for a in self.get_non_inference_attributes())
            state = {k: v for k, v in state.items() if not k.startswith(drop)}
        if inference_only and self.lora_enabled:
            state = {k: v for k, v in state.items() if "lora_" in k}
        return {
            k: v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v
            for k, v in state.items()
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if self._sharded():
            self._set_sharded_state(state)
            return
        if self.lora_enabled and state and all("lora_" in k for k in state):
            # A weight sync that carries only the adapters (see get_state).
            from ray.rllib.utils.torch_utils import convert_to_torch_tensor

            missing, _ = self.load_state_dict(convert_to_torch_tensor(state), strict=False)
            lost = [k for k in missing if "lora_" in k]
            if lost:
                raise ValueError(f"adapter weights missing from the sync: {lost[:5]}")
            return
        super().set_state(state)

    def _set_sharded_state(self, state: dict[str, Any]) -> None:
        """Full weights into FSDP-sharded parameters: each learner copies its own shard (no
        communication, so any single learner may be restored)."""
        from torch.distributed.tensor import distribute_tensor

        named = dict(self.named_parameters())
        missing = [k for k in named if k not in state]
        if missing:
            raise ValueError(f"state lacks {len(missing)} parameter(s), e.g. {missing[:3]}")
        with torch.no_grad():
            for name, param in named.items():
                full = torch.as_tensor(state[name]).to(param.device, param.dtype)
                shard = distribute_tensor(
                    full, param.device_mesh, param.placements, src_data_rank=None
                )
                param.copy_(shard)
        self._full_state = dict(state) if self._full_state is not None else None


def load_policy(path: str | Path, module_dir: str | Path | None = None) -> tuple[Any, Any]:
    """(causal LM, tokenizer) from a model directory or a model name, or from the saved
    ``LLMRLModule`` at ``module_dir`` when that exists (the policy module of a ``memrl train``
    checkpoint, which memrl.experiment.run_dir locates; the LM keeps LoRA adapters if it has
    them).

    Raises:
        FileNotFoundError: a local path that does not exist.
    """
    p = Path(path)
    if module_dir is not None and Path(module_dir).is_dir():
        from ray.rllib.core.rl_module.rl_module import RLModule

        # RLlib reads a relative path as a URI without a scheme: absolute paths only.
        module = RLModule.from_checkpoint(str(Path(module_dir).resolve()))
        return module.policy.lm, module.tokenizer
    if str(path).startswith((".", "/", "~")) and not p.expanduser().exists():
        raise FileNotFoundError(
            f"model {str(path)!r} does not exist: give a model directory, a "
            "model name or a `memrl train` checkpoint directory"
        )
    from memrl.methods.mem1.network import load_lm, load_tokenizer, resolve_dtype

    return load_lm(str(path), resolve_dtype("auto")), load_tokenizer(str(path))
