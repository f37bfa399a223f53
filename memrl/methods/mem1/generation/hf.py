"""Batched generation with a transformers causal LM: KV cache, stop strings, per-token log-probs.

The sampling loop is ours rather than ``model.generate`` so that the recorded log-prob of each token
is exactly that of the distribution it was sampled from (temperature and top-p applied), and so
that each sequence stops on its own stop strings. Prompts are left-padded; positions count from
each prompt's first real token, so a batched prompt sees exactly what it would see alone.

A row ends on any end token the model declares (the tokenizer's and every id of the model's
generation config, e.g. Qwen's ``<|im_end|>`` and ``<|endoftext|>``), on one of its stop strings,
or at the token budget; finished rows leave the batch and the KV cache, so they cost no further
compute. Stop strings are checked only when the new token could complete one (its text holds a
stop string's last character), on the last few tokens.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

from memrl.methods.mem1.generation.base import Generation, GenerationSettings

logger = logging.getLogger(__name__)


def end_token_ids(lm: Any, tokenizer: Any) -> set[int]:
    """Every id that ends a generation: the tokenizer's end token and the model's (generation)
    config end tokens, which may be one id or a list."""
    ids: set[int] = set()
    sources = [getattr(tokenizer, "eos_token_id", None)]
    for owner in (getattr(lm, "generation_config", None), getattr(lm, "config", None)):
        sources.append(getattr(owner, "eos_token_id", None) if owner is not None else None)
    for value in sources:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return ids


def _decode_attention(device: Any) -> Any:
    """The attention kernels of a decode loop: on CUDA every SDPA backend but cuDNN's, which
    builds a new execution plan for every new key length, i.e. at every generated token (measured
    on an H200: 36-40 ms per token step of a 24-layer model with it, 11-15 ms without)."""
    import contextlib

    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )


class HFBackend:
    """Generation with the training LM itself (weights are shared, so syncs need no copy)."""

    def __init__(
        self, lm: Any, tokenizer: Any, settings: GenerationSettings, compute_dtype: Any = None
    ) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.compute_dtype = compute_dtype  # autocast dtype of the forward passes (None: off)
        self._generators: dict[str, Any] = {}
        self._pieces: dict[int, str] = {}
        self.update_weights(lm)
        self.pad_id = tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = tokenizer.eos_token_id

    def update_weights(self, lm: Any) -> None:
        # peft's wrapper hides the LM's forward signature; its adapters live inside the wrapped
        # LM's layers, so calling that LM directly generates with them (and with logits_to_keep).
        self.lm = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
        self.eos_ids = end_token_ids(self.lm, self.tokenizer)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        stops: Sequence[Sequence[str]],
        max_new_tokens: int,
        *,
        greedy: bool = False,
    ) -> list[Generation]:
        if len(prompts) != len(stops):
            raise ValueError(f"{len(prompts)} prompts but {len(stops)} stop lists")
        out: list[Generation] = []
        step = self.settings.batch_size
        for i in range(0, len(prompts), step):
            out += self._generate_batch(
                prompts[i : i + step], stops[i : i + step], max_new_tokens, greedy
            )
        return out

    def _piece(self, token: int) -> str:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self.tokenizer.decode([token])
        return piece

    def _stopped(self, ids: list[int], stops: Sequence[str], last_chars: str, tail: int) -> bool:
        """Whether the newest token completes one of ``stops``: only when its text holds a stop's
        last character are the last ``tail`` tokens decoded and searched."""
        if not stops or not any(c in self._piece(ids[-1]) for c in last_chars):
            return False
        text = self.tokenizer.decode(ids[-tail:])
        return any(s in text for s in stops)

    def _generate_batch(self, prompts, stops, max_new_tokens, greedy) -> list[Generation]:
        import torch

        device = next(self.lm.parameters()).device
        n = len(prompts)
        lengths = [len(p) for p in prompts]
        if min(lengths) == 0:
            raise ValueError("every prompt needs at least one token")
        width = max(lengths)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
            mask[r, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        gen: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        reasons: list[str | None] = [None] * n
        last_chars = ["".join({s[-1] for s in row if s}) for row in stops]
        # A stop string of c characters spans at most c tokens, +2 for partial pieces at its ends.
        tail = [max((len(s) for s in row), default=0) + 2 for row in stops]
        alive = list(range(n))  # the original row of each row still in the batch
        was_training = self.lm.training
        self.lm.eval()
        params = inspect.signature(self.lm.forward).parameters
        cache_kw = "cache" if "cache" in params else "past_key_values"
        extra = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        past = None
        step_ids, step_pos = ids, positions
        from memrl.methods.mem1.network import compute_precision

        precision = compute_precision(device, self.compute_dtype)
        with torch.no_grad(), _decode_attention(device), precision:
            for _ in range(max_new_tokens):
                out = self.lm(
                    input_ids=step_ids,
                    attention_mask=mask,
                    position_ids=step_pos,
                    use_cache=True,
                    **{cache_kw: past},
                    **extra,
                )
                past = getattr(out, "cache", None) or out.past_key_values
                token, logp = self._sample(out.logits[:, -1, :].float(), greedy)  # (a,) each
                keep = []
                for b, (tid, lp) in enumerate(zip(token.tolist(), logp.tolist(), strict=True)):
                    r = alive[b]
                    gen[r].append(tid)
                    logps[r].append(lp)
                    if tid in self.eos_ids:
                        reasons[r] = "eos"
                    elif self._stopped(gen[r], stops[r], last_chars[r], tail[r]):
                        reasons[r] = "stop"
                    else:
                        keep.append(b)
                if not keep:
                    break
                next_ids = token.to(device)
                if len(keep) < len(alive):
                    index = torch.as_tensor(keep, device=device)
                    past.batch_select_indices(index)
                    mask, step_pos, next_ids = mask[index], step_pos[index], next_ids[index]
                    alive = [alive[b] for b in keep]
                step_ids = next_ids[:, None]
                step_pos = step_pos[:, -1:] + 1
                mask = torch.cat([mask, mask.new_ones((len(alive), 1))], -1)
        if was_training:
            self.lm.train()
        results = []
        for r in range(n):
            text_ids = gen[r][:-1] if reasons[r] == "eos" else gen[r]
            results.append(
                Generation(
                    ids=gen[r],
                    logps=logps[r],
                    text=self.tokenizer.decode(text_ids),
                    finish_reason=reasons[r] or "length",
                )
            )
        return results

    def _generator(self, device: Any) -> Any:
        """The sampler's random generator on ``device`` (one per device, seeded alike), so that
        sampling runs where the logits are and only the chosen ids cross to the host."""
        import torch

        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=device).manual_seed(self.settings.seed)
        return self._generators[key]

    def _sample(self, logits: Any, greedy: bool) -> tuple[Any, Any]:
        """Token and its log-prob under the sampling distribution (greedy: temperature 1), both
        (a,) on the CPU; everything over the vocabulary stays on the logits' device."""
        import torch

        if greedy or self.settings.temperature == 0:
            logp_all = torch.log_softmax(logits, -1)
            token = logits.argmax(-1)
            return token.cpu(), logp_all.gather(-1, token[:, None])[:, 0].cpu()
        scaled = logits / self.settings.temperature
        if self.settings.top_p < 1.0:
            sorted_logits, order = scaled.sort(-1, descending=True)
            cum = sorted_logits.softmax(-1).cumsum(-1)
            drop = cum - sorted_logits.softmax(-1) > self.settings.top_p
            sorted_logits[drop] = float("-inf")
            scaled = torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)
        logp_all = torch.log_softmax(scaled, -1)  # (a, V)
        token = torch.multinomial(logp_all.exp(), 1, generator=self._generator(logits.device))
        return token[:, 0].cpu(), logp_all.gather(-1, token)[:, 0].cpu()
