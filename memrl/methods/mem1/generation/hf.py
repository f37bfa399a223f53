"""Batched generation with a transformers causal LM: KV cache, stop strings, per-token log-probs.

The sampling loop is ours rather than ``model.generate`` so that the recorded log-prob of each token
is exactly that of the distribution it was sampled from (temperature and top-p applied), and so
that each sequence stops on its own stop strings. Prompts are left-padded; positions count from
each prompt's first real token, so a batched prompt sees exactly what it would see alone.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

from memrl.methods.mem1.generation.base import Generation, GenerationSettings

logger = logging.getLogger(__name__)


class HFBackend:
    """Generation with the training LM itself (weights are shared, so syncs need no copy)."""

    def __init__(self, lm: Any, tokenizer: Any, settings: GenerationSettings) -> None:
        import torch

        self.lm = lm
        self.tokenizer = tokenizer
        self.settings = settings
        self._generator = torch.Generator(device="cpu").manual_seed(settings.seed)
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id

    def update_weights(self, lm: Any) -> None:
        self.lm = lm

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
        # Stop strings are matched on the decoded tail; this many tokens always cover one.
        tail = {r: max((len(s) for s in stops[r]), default=0) + 2 for r in range(n)}
        was_training = self.lm.training
        self.lm.eval()
        params = inspect.signature(self.lm.forward).parameters
        cache_kw = "cache" if "cache" in params else "past_key_values"
        extra = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        past = None
        step_ids, step_pos = ids, positions
        with torch.no_grad():
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
                logits = out.logits[:, -1, :].float()  # (n, V)
                token, logp = self._sample(logits, greedy)
                next_ids = torch.full((n,), self.pad_id, dtype=torch.long, device=device)
                for r in range(n):
                    if reasons[r] is not None:
                        continue
                    tid = int(token[r])
                    gen[r].append(tid)
                    logps[r].append(float(logp[r]))
                    next_ids[r] = tid
                    if tid == self.eos_id:
                        reasons[r] = "eos"
                    elif stops[r]:
                        text = self.tokenizer.decode(gen[r][-tail[r] :])
                        if any(s in text for s in stops[r]):
                            reasons[r] = "stop"
                if all(reason is not None for reason in reasons):
                    break
                step_ids = next_ids[:, None]
                step_pos = step_pos[:, -1:] + 1
                mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], -1)
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

    def _sample(self, logits: Any, greedy: bool) -> tuple[Any, Any]:
        """Token and its log-prob under the sampling distribution (greedy: temperature 1)."""
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
        logp_all = torch.log_softmax(scaled, -1).cpu()
        token = torch.multinomial(logp_all.exp(), 1, generator=self._generator)[:, 0]
        return token, logp_all.gather(-1, token[:, None])[:, 0]
