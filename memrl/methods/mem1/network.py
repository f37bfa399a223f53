"""The LLM policy as a plain torch module: a causal LM (+ LoRA) with a value head, scoring tokens.

``TokenPolicy.score`` takes rows of packed training sequences (see ``context.Unit``): token ids,
rollout positions, and a segment-level attention rule ``vis`` that, with causality, gives each
row's 2D mask. The mask reaches the model as an additive 0/-inf float tensor of the model's
dtype (never 0/1 floats, which Hugging Face would add to the scores: the MEM1 code's mask bug).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoRASettings:
    """Low-rank adapters (peft) on the attention and MLP projections."""

    enabled: bool = False
    """Train adapters instead of all weights."""
    r: int = 16
    """Adapter rank."""
    alpha: int = 32
    """Adapter scaling numerator."""
    dropout: float = 0.0
    """Adapter dropout."""
    target_modules: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )
    """Module names that get adapters."""


def resolve_dtype(name: str) -> torch.dtype:
    """``auto``: bfloat16 on CUDA, float32 on CPU."""
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in table:
        raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {name!r}")
    return table[name]


def load_lm(path: str, dtype: torch.dtype, lora: LoRASettings | None = None) -> nn.Module:
    """A Hugging Face causal LM from a local directory or a model name (+ LoRA adapters)."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    if lora is not None and lora.enabled:
        from peft import LoraConfig, get_peft_model

        lm = get_peft_model(
            lm,
            LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                task_type="CAUSAL_LM",
            ),
        )
    return lm


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def additive_mask(seg: torch.Tensor, vis: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, T, T) additive mask: 0 where token q may see token k, -inf elsewhere.

    Args:
        seg: (B, T) segment index of each token.
        vis: (B, S, S) bool, segment a may attend to segment b; ``vis[b, s, s]`` must hold for
            every used segment so that no row is fully masked.
    """
    b, t = seg.shape
    causal = torch.ones((t, t), dtype=torch.bool, device=seg.device).tril()
    rows = torch.arange(b, device=seg.device)[:, None, None]
    allowed = vis[rows, seg[:, :, None], seg[:, None, :]] & causal  # (B, T, T)
    mask = torch.zeros((b, 1, t, t), dtype=dtype, device=seg.device)
    return mask.masked_fill(~allowed[:, None], float("-inf"))


class TokenPolicy(nn.Module):
    """Causal LM + optional value head; scores the tokens of packed sequences."""

    def __init__(self, lm: nn.Module, value_head: bool) -> None:
        super().__init__()
        self.lm = lm
        hidden = lm.config.hidden_size if hasattr(lm, "config") else lm.get_base_model().config
        self.value_head = nn.Linear(hidden, 1) if value_head else None
        if self.value_head is not None:
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)

    def score(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        seg: torch.Tensor,
        vis: torch.Tensor,
        *,
        with_values: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Per-token log-probs (and values) of rows of packed sequences.

        Args:
            input_ids, position_ids, seg: (B, T) int64.
            vis: (B, S, S) bool segment visibility.

        Returns:
            ``logp`` (B, T): log-prob of token t given what it may see (0 at t = 0);
            ``values`` (B, T) with ``with_values``: value before token t (0 at t = 0).
        """
        dtype = next(self.lm.parameters()).dtype
        mask = additive_mask(seg, vis, dtype)
        out = self.lm(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=position_ids,
            output_hidden_states=with_values,
            use_cache=False,
        )
        logits = out.logits[:, :-1].float()  # (B, T-1, V)
        target = input_ids[:, 1:]
        logp = logits.gather(-1, target[..., None])[..., 0] - logits.logsumexp(-1)
        result = {"logp": nn.functional.pad(logp, (1, 0))}
        if with_values:
            if self.value_head is None:
                raise ValueError(
                    "values requested but the policy has no value head "
                    "(PPO needs one: set model.value_head)"
                )
            # The critic reads the policy's features without moving them (a value probe).
            hidden = out.hidden_states[-1][:, :-1].detach()
            values = self.value_head(hidden.to(self.value_head.weight.dtype))[..., 0].float()
            result["values"] = nn.functional.pad(values, (1, 0))
        return result
