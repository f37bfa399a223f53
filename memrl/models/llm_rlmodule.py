"""``LLMRLModule``: the RLlib adapter around ``TokenPolicy`` (see memrl/models/llm.py)."""

from __future__ import annotations

from typing import Any

from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule

from memrl.models.llm_net import LoRASettings, TokenPolicy, load_lm, load_tokenizer, resolve_dtype

# Batch columns of token batches (one row = one or more packed sequences).
INPUT_IDS = "input_ids"  # (B, T) int64 token ids
POSITION_IDS = "position_ids"  # (B, T) int64 rollout positions
SEG = "seg"  # (B, T) int64 segment of each token
VIS = "vis"  # (B, S, S) bool segment visibility


class LLMRLModule(TorchRLModule, InferenceOnlyAPI):
    """A causal LM policy: ``forward_train`` scores packed token rows (log-probs, values).

    ``model_config``: ``path`` (model directory or name), ``dtype``, ``lora`` (LoRASettings as a
    dict), ``value_head`` (bool), ``generation`` (GenerationSettings as a dict, for env runners).
    """

    def setup(self) -> None:
        cfg = self.model_config
        self.tokenizer = load_tokenizer(cfg["path"])
        lora = LoRASettings(**cfg.get("lora", {}))
        self.lora_enabled = lora.enabled
        lm = load_lm(cfg["path"], resolve_dtype(cfg.get("dtype", "auto")), lora)
        value_head = bool(cfg.get("value_head")) and not self.inference_only
        self.policy = TokenPolicy(lm, value_head=value_head)

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
        )

    def get_state(self, components=None, *, not_components=None, inference_only=False, **kwargs):
        state = super().get_state(
            components, not_components=not_components, inference_only=inference_only, **kwargs
        )
        if inference_only and self.lora_enabled:
            # Env runners load the same base weights: only the adapters travel.
            state = {k: v for k, v in state.items() if "lora_" in k}
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        if self.lora_enabled and state and all("lora_" in k for k in state):
            # A weight sync that carries only the adapters (see get_state).
            from ray.rllib.utils.torch_utils import convert_to_torch_tensor

            missing, _ = self.load_state_dict(convert_to_torch_tensor(state), strict=False)
            lost = [k for k in missing if "lora_" in k]
            if lost:
                raise ValueError(f"adapter weights missing from the sync: {lost[:5]}")
            return
        super().set_state(state)
