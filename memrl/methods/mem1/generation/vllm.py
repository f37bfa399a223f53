"""Generation with an in-process vLLM engine on a GPU env runner (extra ``vllm``).

Untested here: vLLM cannot be installed on the machines this project was built on. The backend is
written against vLLM's documented offline API (``LLM``, ``SamplingParams``, ``TokensPrompt``,
``LLM.apply_model``) and kept small on purpose.

Log-probs: ``SamplingParams(logprobs=0)`` returns the sampled token's log-prob. vLLM reports raw
(pre-temperature) log-probs by default, which equal the behaviour log-probs at temperature 1 and
top_p 1, the training setting of the paper.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from typing import Any

from memrl.methods.mem1.generation.base import Generation, GenerationSettings

logger = logging.getLogger(__name__)


class VLLMBackend:
    """A vLLM engine that holds a copy of the policy's weights (refreshed after each sync)."""

    def __init__(self, lm: Any, tokenizer: Any, settings: GenerationSettings) -> None:
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError(
                "generation backend 'vllm' needs vLLM: pip install -e .[vllm] (GPU nodes only), "
                "or set model.generation.backend: hf"
            ) from err
        self.tokenizer = tokenizer
        self.settings = settings
        # The engine loads from a directory: write the (merged) policy once at start.
        self._dir = tempfile.mkdtemp(prefix="memrl_vllm_")
        _merged(lm).save_pretrained(self._dir)
        tokenizer.save_pretrained(self._dir)
        self._llm = LLM(
            model=self._dir,
            dtype="bfloat16",
            gpu_memory_utilization=settings.gpu_memory_utilization,
            enable_prefix_caching=True,
            seed=settings.seed,
        )

    def update_weights(self, lm: Any) -> None:
        weights = [(k, v) for k, v in _merged(lm).state_dict().items()]
        self._llm.apply_model(lambda model: model.load_weights(weights))
        self._llm.reset_prefix_cache()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        stops: Sequence[Sequence[str]],
        max_new_tokens: int,
        *,
        greedy: bool = False,
    ) -> list[Generation]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [
            SamplingParams(
                temperature=0.0 if greedy else self.settings.temperature,
                top_p=self.settings.top_p,
                max_tokens=max_new_tokens,
                stop=list(s),
                include_stop_str_in_output=True,
                logprobs=0,
            )
            for s in stops
        ]
        outputs = self._llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
        )
        results = []
        for out in outputs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            logps = [float(lp[t].logprob) for lp, t in zip(c.logprobs, ids, strict=True)]
            reason = "stop" if c.finish_reason == "stop" else "length"
            if ids and ids[-1] == self.tokenizer.eos_token_id:
                reason = "eos"
            results.append(Generation(ids=ids, logps=logps, text=c.text, finish_reason=reason))
        return results


def _merged(lm: Any) -> Any:
    """The plain causal LM (LoRA adapters merged into a copy when present)."""
    if hasattr(lm, "merge_and_unload"):
        import copy

        return copy.deepcopy(lm).merge_and_unload()
    return lm
