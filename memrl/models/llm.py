"""The LLM agent as an RLlib RLModule, and its model settings (``model: {type: llm, ...}``).

``LLMRLModule`` (memrl/models/llm_rlmodule.py) wraps ``TokenPolicy`` (a Hugging Face causal LM,
optional LoRA, a value head for PPO). Learners call ``forward_train`` on rows of packed token
sequences; env runners build the module with ``inference_only=True`` (no value head) and generate
through a backend (``memrl.models.generation``). Weight syncs carry the LM weights (LoRA: only the
adapters).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from memrl.models.generation.base import GenerationSettings
from memrl.models.llm_net import LoRASettings
from memrl.models.tokenizer import TinyModelSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LLMModelSettings:
    """A causal LM policy (any Hugging Face model, or a tiny local one) and how it generates."""

    TAG_KEY: ClassVar[tuple[str, str]] = ("type", "llm")

    path: str = "tiny"
    """A local model directory, a model name, or ``tiny`` (a random Qwen2-shaped model and a BPE
    tokenizer built locally from the env's text, written under the run directory)."""
    tiny: TinyModelSettings = field(default_factory=TinyModelSettings)
    """Shape of the ``tiny`` model."""
    tiny_corpus_episodes: int = 200
    """Env episodes whose text trains the ``tiny`` tokenizer."""
    lora: LoRASettings = field(default_factory=LoRASettings)
    """LoRA adapters (peft)."""
    dtype: str = "auto"
    """auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16 or float16."""
    value_head: bool | None = None
    """Value head for PPO's critic (null: on when algorithm.algorithm is ppo)."""
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    """The generation backend of the env runners."""

    def validate(self, where: str) -> None:
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(
                f"{where}.dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}"
            )

    def model_config(self, exp: Any) -> dict[str, Any]:
        """The RLModule's model_config dict (the tiny model is materialized here, once)."""
        path = self.path
        if path.startswith((".", "/", "~")) and not Path(path).expanduser().exists():
            raise FileNotFoundError(
                f"model.path {path!r} does not exist; give a model directory, "
                "a model name, or 'tiny'"
            )
        if path == "tiny":
            path = str(ensure_tiny_checkpoint(self, exp))
        algo = getattr(exp, "algorithm", None)
        value_head = self.value_head
        if value_head is None:
            value_head = getattr(algo, "algorithm", "ppo") == "ppo"
        return {
            "path": path,
            "dtype": self.dtype,
            "lora": dataclasses.asdict(self.lora),
            "value_head": bool(value_head),
            "generation": dataclasses.asdict(self.generation),
        }

    def apply(self, algo: Any, exp: Any) -> None:
        from ray.rllib.core.rl_module.rl_module import RLModuleSpec

        from memrl.models.llm_rlmodule import LLMRLModule

        algo.rl_module(
            rl_module_spec=RLModuleSpec(
                module_class=LLMRLModule, model_config=self.model_config(exp)
            )
        )


def ensure_tiny_checkpoint(settings: LLMModelSettings, exp: Any) -> Path:
    """Writes (once) the tiny model + tokenizer for an experiment; returns its directory."""
    from memrl.models.tokenizer import make_tiny_checkpoint

    prompt = getattr(getattr(exp, "algorithm", None), "prompt", None)
    prompt_key = dataclasses.asdict(prompt) if prompt else None
    key = json.dumps(
        [
            exp.env.id,
            exp.env.config,
            dataclasses.asdict(settings.tiny),
            settings.tiny_corpus_episodes,
            prompt_key,
        ],
        sort_keys=True,
        default=str,
    )
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    out = Path(exp.run.output_dir) / "_tiny_models" / digest
    if (out / "config.json").exists():
        return out.resolve()
    from memrl.models.prompts import PromptSettings

    prompt = prompt or PromptSettings()
    texts = env_texts(exp.env.id, exp.env.config, prompt, settings.tiny_corpus_episodes)
    make_tiny_checkpoint(out, texts, prompt.all_tag_strings(), settings.tiny)
    return out.resolve()


def env_texts(env_id: str, env_config: dict[str, Any], prompt: Any, episodes: int) -> list[str]:
    """Text a text env shows an agent (prompts, actions, observations), to train a tokenizer on.

    Doc-QA is played by its scripted agent (so its responses are in the text too); other text envs
    get one search per question of their task.
    """
    from memrl.envs import make_env
    from memrl.models.prompts import render_observation, render_prompt

    env = make_env(env_id, env_config)
    texts = [render_prompt(prompt, "q1; q2")]
    tags = prompt.text_tags()
    scripted = None
    if env_id == "memrl/DocQA-v0":
        from memrl.envs.doc_qa.agent import ScriptedAgent

        scripted = ScriptedAgent(tags)
    try:
        for i in range(episodes):
            obs, info = env.reset(seed=i)
            texts.append(render_prompt(prompt, obs))
            if scripted is not None:
                scripted.reset(obs, info)
            questions = list(info.get("task", {}).get("questions", []))
            observation = None
            for q in questions[:8] if scripted is None else range(4 * len(questions) + 2):
                if scripted is not None:
                    act = scripted.act(observation)
                else:
                    act = f"<{tags.state}> {q} </{tags.state}> <{tags.search}> {q} </{tags.search}>"
                texts.append(act)
                observation, _, term, trunc, _ = env.step(act)
                texts.append(render_observation(prompt, observation))
                if term or trunc:
                    break
    finally:
        env.close()
    return texts


def load_policy(path: str | Path) -> tuple[Any, Any]:
    """(causal LM, tokenizer) from a model directory, a model name, or a ``memrl train``
    checkpoint (its RLModule is restored; the LM keeps LoRA adapters if it has them).

    Raises:
        FileNotFoundError: a local path that does not exist.
    """
    p = Path(path)
    module_dir = p / "learner_group" / "learner" / "rl_module" / "default_policy"
    if module_dir.is_dir():
        from ray.rllib.core.rl_module.rl_module import RLModule

        module = RLModule.from_checkpoint(str(module_dir))
        return module.policy.lm, module.tokenizer
    if str(path).startswith((".", "/", "~")) and not p.expanduser().exists():
        raise FileNotFoundError(
            f"model {str(path)!r} does not exist: give a model directory, a "
            "model name or a `memrl train` checkpoint directory"
        )
    from memrl.models.llm_net import load_lm, load_tokenizer, resolve_dtype

    return load_lm(str(path), resolve_dtype("auto")), load_tokenizer(str(path))
