"""The LLM policy as a plain torch module: a causal LM (+ LoRA) with a value head, scoring tokens.

``TokenPolicy`` takes rows of packed training sequences (see ``context.Unit``): token ids,
rollout positions, and a segment-level attention rule ``vis`` that, with causality, gives each
row's 2D mask. The mask reaches the model as an additive 0/-inf float tensor of the model's
dtype (never 0/1 floats, which Hugging Face would add to the scores: the MEM1 code's mask bug).

Log-probs are read from the decoder's last hidden state through the output layer a chunk of
positions at a time, and only at the positions asked for (the loss tokens), so no full
(tokens x vocabulary) logits tensor is ever built: for Qwen2.5's 151,936-token vocabulary that
tensor alone is ~5 GB in fp32 for one 8k-token row.
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


DEFAULT_LOGP_CHUNK_TOKENS = 256
"""Positions whose logits are computed together by default: at Qwen2.5's 151,936-token
vocabulary one chunk's float32 logits are 156 MB (an update on a 4096-token row then peaks at
0.13x the memory of full logits on a CPU; memrl bench mem1-memory)."""

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str) -> torch.dtype:
    """The dtype the weights are stored in; ``auto``: float32.

    Trained weights stay float32 (the optimizer's master copy) whatever the compute dtype: an
    AdamW step of lr 1e-6 on bfloat16 weights of magnitude 0.02 is about 1% of their spacing and
    rounds away (measured: 2% of such weights change at all in 10 steps).
    """
    if name == "auto":
        return torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {name!r}")
    return DTYPES[name]


def resolve_compute_dtype(name: str) -> torch.dtype | None:
    """The dtype matrix products run in (autocast); ``auto``: bfloat16 on CUDA, else None (the
    weights' own dtype)."""
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else None
    if name not in DTYPES:
        raise ValueError(f"compute_dtype must be auto, float32, bfloat16 or float16, got {name!r}")
    return DTYPES[name]


def compute_precision(device: torch.device, compute: torch.dtype | None) -> Any:
    """A context in which forward passes compute in ``compute`` (autocast) while the weights
    keep their own dtype; no-op for None or float32."""
    import contextlib

    if compute is None or compute == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=compute)


def freeze_lower_layers(lm: nn.Module, layers: int) -> None:
    """Freezes the input embeddings and the lowest ``layers`` decoder layers of a causal LM.

    Nothing below the first trainable layer then needs a gradient, so autograd records no graph
    there: the forward pass through the frozen layers keeps no activations and the backward pass
    stops at the first trainable layer. With tied embeddings the output layer is the input
    embedding matrix and is frozen with it.

    Raises:
        ValueError: ``layers`` is negative or leaves no decoder layer to train.
    """
    decoder_layers = causal_lm(lm).get_decoder().layers
    if not 0 <= layers < len(decoder_layers):
        raise ValueError(
            f"model.freeze_layers must be in [0, {len(decoder_layers) - 1}] for this "
            f"{len(decoder_layers)}-layer model (at least one layer trains), got {layers}"
        )
    if layers == 0:
        return
    causal_lm(lm).get_input_embeddings().weight.requires_grad_(False)
    for layer in decoder_layers[:layers]:
        for p in layer.parameters():
            p.requires_grad_(False)


def load_lm(
    path: str,
    dtype: torch.dtype,
    lora: LoRASettings | None = None,
    activation_checkpointing: bool = False,
    freeze_layers: int = 0,
) -> nn.Module:
    """A Hugging Face causal LM from a local directory or a model name, set up for training by
    ``adapt_lm`` (LoRA, activation checkpointing, frozen lower layers)."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return adapt_lm(lm, lora, activation_checkpointing, freeze_layers)


def adapt_lm(
    lm: nn.Module,
    lora: LoRASettings | None = None,
    activation_checkpointing: bool = False,
    freeze_layers: int = 0,
) -> nn.Module:
    """``lm`` set up for training; returns it, or its peft wrapper with LoRA.

    ``activation_checkpointing``: keep only each decoder layer's input during training passes and
    recompute the rest in the backward pass (less memory, about a third more compute).
    ``freeze_layers``: the embeddings and the lowest N decoder layers do not train (see
    ``freeze_lower_layers``); LoRA adapters then go only on the layers above them.
    """
    num_layers = len(lm.get_decoder().layers)
    if activation_checkpointing:
        # Non-reentrant: gradients reach LoRA adapters and frozen embeddings alike. Newer
        # transformers name the switch activation_checkpointing_enable.
        kwargs = {"use_reentrant": False}
        if hasattr(lm, "activation_checkpointing_enable"):
            lm.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if lora is not None and lora.enabled:
        from peft import LoraConfig, get_peft_model

        above = {"layers_to_transform": list(range(freeze_layers, num_layers))}
        lm = get_peft_model(
            lm,
            LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                task_type="CAUSAL_LM",
                **(above if freeze_layers else {}),
            ),
        )
    freeze_lower_layers(lm, freeze_layers)
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


def causal_lm(lm: nn.Module) -> nn.Module:
    """The Hugging Face causal LM inside ``lm`` (itself, or the model a peft wrapper adapts; the
    adapters stay in its layers, so calling it still applies them)."""
    return lm.get_base_model() if hasattr(lm, "get_base_model") else lm


def token_logp(
    head: nn.Module,
    hidden: torch.Tensor,
    target: torch.Tensor,
    chunk_tokens: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """log softmax(head(hidden) / temperature)[target], ``chunk_tokens`` positions at a time.

    Only one chunk's logits (chunk_tokens x vocabulary) exist at any moment: with gradients on,
    each chunk is recomputed in the backward pass instead of being kept. A bias-free linear head
    (every causal LM memrl knows) takes ``HeadLogp``, whose backward pass adds each chunk's
    weight gradient into one buffer in place; other heads are checkpointed chunk by chunk.

    Args:
        hidden: (N, H) hidden states of the positions to score.
        target: (N,) the token each position predicts.

    Returns:
        (N,) float32 log-probs.
    """
    from torch.utils.checkpoint import checkpoint

    if hidden.shape[0] == 0:
        return hidden.new_zeros((0,), dtype=torch.float32)
    weight = getattr(head, "weight", None)
    plain = (
        type(head) is nn.Linear
        and head.bias is None
        and type(weight) is nn.Parameter  # not an FSDP-sharded DTensor
    )
    if plain:
        return HeadLogp.apply(hidden, weight, target, chunk_tokens, temperature)

    def chunk_logp(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        logits = head(h).float()  # (n, V)
        if temperature != 1.0:
            logits = logits.div(temperature)
        return logits.gather(-1, t[:, None])[:, 0] - logits.logsumexp(-1)

    keep_graph = torch.is_grad_enabled() and (
        hidden.requires_grad or any(p.requires_grad for p in head.parameters())
    )
    out = []
    for start in range(0, hidden.shape[0], chunk_tokens):
        h, t = hidden[start : start + chunk_tokens], target[start : start + chunk_tokens]
        if keep_graph:
            out.append(checkpoint(chunk_logp, h, t, use_reentrant=False))
        else:
            out.append(chunk_logp(h, t))
    return torch.cat(out)


def rank_and_world() -> tuple[int, int]:
    """(this process's rank, number of learners) of the learners' process group ((0, 1) alone)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _chunk_logits(h: torch.Tensor, w: torch.Tensor, temperature: float) -> torch.Tensor:
    """float32 logits / temperature of hidden states ``h`` (n, H) through head weight ``w``."""
    logits = (h.to(w.dtype) @ w.T).float()
    return logits / temperature if temperature != 1.0 else logits


class HeadLogp(torch.autograd.Function):
    """log softmax(hidden @ weight.T / temperature)[target] in chunks of positions.

    Forward keeps no logits; backward recomputes each chunk's and writes the gradients straight
    into their destinations: the hidden states' gradient chunk by chunk, and the weight's as
    float32 ``addmm_`` updates of one buffer. That buffer is the weight's ``.grad`` itself when
    this process trains alone, so gradients accumulated over micro-batches never hold a second
    (vocabulary x hidden) tensor: with a 151,936-token vocabulary that tensor is 545 MB at width
    896. Under DDP the buffer is returned to autograd instead, whose hooks all-reduce it.

    Matrix products run in the autocast dtype when autocast is on (as ``head(h)`` would), and
    the weight is cast once per pass, not per chunk.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        target: torch.Tensor,
        chunk_tokens: int,
        temperature: float,
    ) -> torch.Tensor:
        device = hidden.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        w = weight.to(dtype) if dtype is not None else weight
        out = []
        with torch.no_grad():
            for start in range(0, hidden.shape[0], chunk_tokens):
                logits = _chunk_logits(hidden[start : start + chunk_tokens], w, temperature)
                t = target[start : start + chunk_tokens]
                out.append(logits.gather(-1, t[:, None])[:, 0] - logits.logsumexp(-1))
        ctx.save_for_backward(hidden, weight, target)
        ctx.chunk_tokens, ctx.temperature, ctx.dtype = chunk_tokens, temperature, dtype
        return torch.cat(out)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        hidden, weight, target = ctx.saved_tensors
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        w = weight.to(ctx.dtype) if ctx.dtype is not None else weight
        grad_h = torch.empty_like(hidden) if want_h else None
        grad_w = None
        in_place = want_w and rank_and_world()[1] == 1
        if want_w:
            if in_place and weight.grad is None:
                weight.grad = torch.zeros_like(weight)
            grad_w = weight.grad if in_place else torch.zeros_like(weight, dtype=torch.float32)
        scale = 1.0 / ctx.temperature
        for start in range(0, hidden.shape[0], ctx.chunk_tokens):
            stop = start + ctx.chunk_tokens
            h = hidden[start:stop]
            # d logp[t] / d logits = (onehot(t) - softmax(logits / T)) / T
            g = torch.softmax(_chunk_logits(h, w, ctx.temperature), dim=-1).neg_()
            g.scatter_add_(-1, target[start:stop, None], torch.ones_like(g[:, :1]))
            g.mul_((grad_out[start:stop] * scale)[:, None])
            if want_h:
                grad_h[start:stop] = (g.to(w.dtype) @ w).to(hidden.dtype)
            if want_w:
                grad_w.addmm_(g.T.to(grad_w.dtype), h.to(grad_w.dtype))
        if want_w and not in_place:
            grad_w = grad_w.to(weight.dtype)
        return grad_h, None if in_place else grad_w, None, None, None


class TokenPolicy(nn.Module):
    """Causal LM + optional value head; scores the tokens of packed sequences.

    Args:
        lm: a Hugging Face causal LM (optionally wrapped by peft).
        value_head: add a linear critic on the last hidden state (PPO).
        logp_chunk_tokens: positions whose logits are computed together (memory vs speed).
        full_logits: compute the logits of every position at once, as the LM's own forward does
            (fp32 logits over the whole vocabulary: ~5 GB for one 8k-token row of Qwen2.5);
            kept to measure against, and for LMs that change their logits after the head.
        compute_dtype: the dtype forward passes compute in (autocast over the weights' dtype);
            None: the weights' dtype.
        temperature: the policy's sampling temperature: log-probs are those of softmax(logits /
            temperature), the distribution rollouts sample from, so that behaviour and learner
            log-probs describe one policy.
    """

    def __init__(
        self,
        lm: nn.Module,
        value_head: bool,
        *,
        logp_chunk_tokens: int = DEFAULT_LOGP_CHUNK_TOKENS,
        full_logits: bool = False,
        compute_dtype: torch.dtype | None = None,
        temperature: float = 1.0,
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 (greedy decoding has no log-probs to train), got "
                f"{temperature}"
            )
        self.lm = lm
        self.compute_dtype = compute_dtype
        self.temperature = temperature
        config = causal_lm(lm).config
        if not full_logits and getattr(config, "final_logit_softcapping", None) is not None:
            raise ValueError(
                f"{type(causal_lm(lm)).__name__} soft-caps its logits after the output layer, "
                "which chunked log-probs do not reproduce; set model.full_logits: true"
            )
        if logp_chunk_tokens < 1:
            raise ValueError(f"logp_chunk_tokens must be >= 1, got {logp_chunk_tokens}")
        self.logp_chunk_tokens = logp_chunk_tokens
        self.full_logits = full_logits
        self.value_head = nn.Linear(config.hidden_size, 1) if value_head else None
        if self.value_head is not None:
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        seg: torch.Tensor,
        vis: torch.Tensor,
        *,
        with_values: bool = False,
        logp_mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Per-token log-probs (and values) of rows of packed sequences.

        Args:
            input_ids, position_ids, seg: (B, T) int64.
            vis: (B, S, S) bool segment visibility.
            logp_mask: (B, T) bool, the tokens whose log-prob is wanted (the loss tokens); the
                others get 0 and cost no logits. None: every token.

        Returns:
            ``logp`` (B, T): log-prob of token t given what it may see (0 at t = 0);
            ``values`` (B, T) with ``with_values``: value before token t (0 at t = 0).
        """
        if with_values and self.value_head is None:
            raise ValueError(
                "values requested but the policy has no value head "
                "(PPO needs one: set model.value_head)"
            )
        weights = next(self.lm.parameters())
        with compute_precision(weights.device, self.compute_dtype):
            return self._scores(
                input_ids,
                position_ids,
                additive_mask(seg, vis, self.compute_dtype or weights.dtype),
                with_values,
                logp_mask,
            )

    def _scores(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        with_values: bool,
        logp_mask: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        if self.full_logits:
            out = self.lm(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=position_ids,
                output_hidden_states=with_values,
                use_cache=False,
            )
            logits = out.logits[:, :-1].float() / self.temperature  # (B, T-1, V)
            target = input_ids[:, 1:]
            logp = logits.gather(-1, target[..., None])[..., 0] - logits.logsumexp(-1)
            hidden = out.hidden_states[-1] if with_values else None
        else:
            model = causal_lm(self.lm)
            hidden = model.get_decoder()(
                input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False
            ).last_hidden_state  # (B, T, H)
            if logp_mask is None:
                wanted = torch.ones_like(input_ids[:, 1:], dtype=torch.bool)  # (B, T-1)
            else:
                wanted = logp_mask[:, 1:].bool()
            rows, cols = wanted.nonzero(as_tuple=True)
            picked = token_logp(
                model.get_output_embeddings(),
                hidden[:, :-1][rows, cols],
                input_ids[:, 1:][rows, cols],
                self.logp_chunk_tokens,
                self.temperature,
            )
            logp = hidden.new_zeros(wanted.shape, dtype=torch.float32).index_put(
                (rows, cols), picked
            )  # (B, T-1)
        result = {"logp": nn.functional.pad(logp, (1, 0))}
        if with_values:
            # The critic reads the policy's features without moving them (a value probe).
            feats = hidden[:, :-1].detach().to(self.value_head.weight.dtype)
            result["values"] = nn.functional.pad(self.value_head(feats)[..., 0].float(), (1, 0))
        return result

    def score(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """``forward`` (called through the module, so wrappers such as FSDP see the call)."""
        return self(*args, **kwargs)
