"""Generation backends behind one interface: ``hf`` (transformers), ``vllm`` and ``openai``.

``make_backend(settings, lm, tokenizer)`` builds the backend a config names. Every backend
returns, per prompt, the generated token ids, their behaviour log-probs and the decoded text, so
that the env runner records exactly what the model sampled.
"""

from __future__ import annotations

from typing import Any

from memrl.methods.mem1.generation.base import Generation, GenerationBackend, GenerationSettings

BACKENDS = ("hf", "vllm", "openai")


def make_backend(
    settings: GenerationSettings,
    lm: Any,
    tokenizer: Any,
    model_path: str | None = None,
    compute_dtype: Any = None,
) -> GenerationBackend:
    """The backend named by ``settings.backend``, bound to a causal LM and its tokenizer.

    ``model_path``: the folder (or name) ``lm`` was loaded from; the vllm backend starts its
    engine from it. ``compute_dtype``: the hf backend's autocast dtype (None: the weights').

    Raises:
        ValueError: unknown backend name.
    """
    if settings.backend == "hf":
        from memrl.methods.mem1.generation.hf import HFBackend

        return HFBackend(lm, tokenizer, settings, compute_dtype)
    if settings.backend == "vllm":
        from memrl.methods.mem1.generation.vllm import VLLMBackend

        return VLLMBackend(lm, tokenizer, settings, model_path)
    if settings.backend == "openai":
        from memrl.methods.mem1.generation.openai import OpenAIBackend

        return OpenAIBackend(tokenizer, settings)
    raise ValueError(f"Unknown generation backend {settings.backend!r}. Available: {BACKENDS}")


__all__ = ["BACKENDS", "Generation", "GenerationBackend", "GenerationSettings", "make_backend"]
