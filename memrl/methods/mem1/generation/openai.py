"""Generation through an OpenAI-compatible completions server (e.g. ``vllm serve``), for evaluation.

Prompts are sent as token-id lists to ``POST {base_url}/completions`` with ``logprobs: 1``; the
server's tokens are mapped back to ids by the local tokenizer (or read directly when the server
returns ``token_id:N`` strings, as ``vllm serve`` does with ``return_tokens_as_token_ids``). Uses
only the standard library.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from memrl.methods.mem1.generation.base import Generation, GenerationSettings


class OpenAIBackend:
    """A remote server generates; weights are whatever the server holds."""

    def __init__(self, tokenizer: Any, settings: GenerationSettings) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.url = settings.base_url.rstrip("/") + "/completions"
        self.model = settings.served_model or getattr(tokenizer, "name_or_path", "")

    def update_weights(self, lm: Any) -> None:
        """The server owns its weights: nothing to do (evaluation backend)."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        stops: Sequence[Sequence[str]],
        max_new_tokens: int,
        *,
        greedy: bool = False,
    ) -> list[Generation]:
        pairs = zip(prompts, stops, strict=True)
        return [self._one(p, s, max_new_tokens, greedy) for p, s in pairs]

    def _one(
        self, prompt: Sequence[int], stop: Sequence[str], max_new_tokens: int, greedy: bool
    ) -> Generation:
        body = {
            "model": self.model,
            "prompt": list(prompt),
            "max_tokens": max_new_tokens,
            "temperature": 0.0 if greedy else self.settings.temperature,
            "top_p": self.settings.top_p,
            "stop": list(stop) or None,
            "logprobs": 1,
            "include_stop_str_in_output": True,
            "return_tokens_as_token_ids": True,
            "seed": self.settings.seed,
        }
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.settings.request_timeout_s) as resp:
                data = json.loads(resp.read())
        except urllib.error.URLError as err:
            raise ConnectionError(
                f"completions server at {self.url} did not answer ({err}); start one (e.g. "
                "`vllm serve MODEL`) or set model.generation.base_url"
            ) from err
        choice = data["choices"][0]
        text = choice.get("text", "")
        lp = choice.get("logprobs") or {}
        tokens = lp.get("tokens") or []
        logps = [float(x) for x in lp.get("token_logprobs") or []]
        if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            ids = [int(t.split(":", 1)[1]) for t in tokens]
        else:
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            logps = logps if len(logps) == len(ids) else [0.0] * len(ids)
        finish = choice.get("finish_reason") or "length"
        reason = "stop" if finish == "stop" else "length"
        return Generation(ids=ids, logps=logps, text=text, finish_reason=reason)
