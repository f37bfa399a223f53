"""The generation interface shared by all backends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class GenerationSettings:
    """Which backend generates, and how it samples."""

    backend: Literal["hf", "vllm", "openai"] = "hf"
    """``hf`` (transformers, CPU or GPU), ``vllm`` (in-process engine, GPU), ``openai`` (any
    OpenAI-compatible completions server, for evaluation)."""
    temperature: float = 1.0
    """Sampling temperature (1.0 in training, as in the paper)."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0: off)."""
    batch_size: int = 64
    """Most prompts generated together in one call (hf)."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """openai: the server's base URL."""
    served_model: str = ""
    """openai: the model name the server expects (empty: the model path)."""
    request_timeout_s: float = 120.0
    """openai: timeout of one request."""
    gpu_memory_utilization: float = 0.4
    """vllm: share of the GPU the engine may take (the rest is left to the learner)."""
    seed: int = 0
    """Seed of the sampler."""

    @property
    def training_temperature(self) -> float:
        """The temperature learners score tokens at: the sampling temperature, so that learner
        and behaviour log-probs are those of one distribution (1 for greedy settings)."""
        return self.temperature if self.temperature > 0 else 1.0

    def validate(self, where: str) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"{where}: temperature must be >= 0 and top_p in (0, 1], "
                f"got {self.temperature} and {self.top_p}"
            )
        if self.batch_size < 1:
            raise ValueError(f"{where}.batch_size must be >= 1, got {self.batch_size}")


@dataclass
class Generation:
    """What one prompt produced."""

    ids: list[int]
    """Generated token ids (stop string included)."""
    logps: list[float]
    """Behaviour log-prob of each id (under the sampling distribution)."""
    text: str
    """The decoded text of ``ids``."""
    finish_reason: Literal["stop", "eos", "length"]
    """Why generation ended."""


class GenerationBackend(Protocol):
    """Generates continuations of token-id prompts."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        stops: Sequence[Sequence[str]],
        max_new_tokens: int,
        *,
        greedy: bool = False,
    ) -> list[Generation]:
        """One continuation per prompt; ``stops[i]`` are prompt i's stop strings (kept)."""
        ...

    def update_weights(self, lm: Any) -> None:
        """Takes the weights of ``lm`` (called after each weight sync)."""
        ...
