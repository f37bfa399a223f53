"""A tokenizer and a tiny causal LM built locally, for tests and CPU runs (nothing from a hub).

``model: {type: llm, path: tiny}`` asks for one: ``ensure_tiny_checkpoint`` plays the experiment's
text env for a few episodes (``env_texts``), trains the tokenizer on that text and writes tokenizer
and model into the run directory, keyed by everything that shapes them.

``build_tokenizer`` trains a byte-level BPE (lossless on any text, so the env parses exactly what
the model wrote) on text the caller generates, with the turn-format tags as single added tokens.
``build_tiny_model`` makes a randomly initialised Qwen2-shaped causal LM. ``make_tiny_checkpoint``
writes both into one directory that every process (learners, env runners) loads, so all of them
share the same tokenizer and initial weights.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>"]
CHAT_MARKERS = ["<|user|>", "<|assistant|>"]


@dataclass(frozen=True)
class TinyModelSettings:
    """Shape of the randomly initialised Qwen2-style model used on CPU."""

    vocab_size: int = 2048
    """BPE vocabulary size (tags and specials come on top)."""
    hidden_size: int = 64
    """Model width."""
    num_layers: int = 2
    """Transformer blocks."""
    num_heads: int = 4
    """Attention heads."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention)."""
    intermediate_size: int = 128
    """MLP width."""
    max_positions: int = 8192
    """Longest sequence (RoPE)."""
    seed: int = 0
    """Seed of the initial weights."""

    def validate(self, where: str) -> None:
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"{where}: hidden_size ({self.hidden_size}) must divide by num_heads "
                f"({self.num_heads}) and num_heads by num_kv_heads ({self.num_kv_heads})"
            )


def build_tokenizer(
    texts: Iterable[str], vocab_size: int = 2048, extra_tokens: Sequence[str] = ()
) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts``.

    Args:
        texts: training text (prompts, observations, answers the model will see).
        vocab_size: BPE vocabulary size.
        extra_tokens: strings that must be single tokens (the tags), kept in decoded text.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>"
    )
    fast.add_tokens(list(dict.fromkeys([*CHAT_MARKERS, *extra_tokens])))
    return fast


def build_tiny_model(vocab_size: int, settings: TinyModelSettings | None = None) -> Any:
    """A randomly initialised Qwen2ForCausalLM of the given shape (float32)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    s = settings or TinyModelSettings()
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=s.hidden_size,
        intermediate_size=s.intermediate_size,
        num_hidden_layers=s.num_layers,
        num_attention_heads=s.num_heads,
        num_key_value_heads=s.num_kv_heads,
        max_position_embeddings=s.max_positions,
        tie_word_embeddings=True,
    )
    torch.manual_seed(s.seed)
    return Qwen2ForCausalLM(config)


def make_tiny_checkpoint(
    out_dir: str | Path,
    texts: Iterable[str],
    extra_tokens: Sequence[str] = (),
    settings: TinyModelSettings | None = None,
) -> Path:
    """Builds tokenizer + tiny model and saves both to ``out_dir`` (HF format); returns the path."""
    s = settings or TinyModelSettings()
    out = Path(out_dir)
    tokenizer = build_tokenizer(texts, s.vocab_size, extra_tokens)
    model = build_tiny_model(len(tokenizer), s)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    # Written next to its final place and renamed, so a crash never leaves a folder that looks
    # complete (the caller reuses any folder that has a config.json).
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
        (tmp / "memrl_tiny.json").write_text(json.dumps(asdict(s), indent=1))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("tiny model (%d params) written to %s", model.num_parameters(), out)
    return out


def ensure_tiny_checkpoint(
    root: str | Path,
    env_id: str,
    env_config: dict[str, Any],
    prompt: Any,
    settings: TinyModelSettings,
    corpus_episodes: int,
) -> Path:
    """The tiny model + tokenizer for an env and prompt, under ``root`` (built once, then reused).

    Args:
        root: where tiny models live (``<run dir>/tiny_model``); one subfolder per digest of the
            env id and config, the prompt settings, the model shape and the corpus size.
        prompt: the ``PromptSettings`` whose tags become single tokens.
    """
    key = json.dumps(
        [env_id, env_config, asdict(settings), corpus_episodes, asdict(prompt)],
        sort_keys=True,
        default=str,
    )
    out = Path(root) / hashlib.sha1(key.encode()).hexdigest()[:10]
    if (out / "config.json").exists():
        return out.resolve()
    texts = env_texts(env_id, env_config, prompt, corpus_episodes)
    make_tiny_checkpoint(out, texts, prompt.all_tag_strings(), settings)
    return out.resolve()


def env_texts(env_id: str, env_config: dict[str, Any], prompt: Any, episodes: int) -> list[str]:
    """Text a text env shows an agent (prompts, actions, observations), to train a tokenizer on.

    Doc-QA is played by its scripted agent (so its responses are in the text too); other text envs
    get one search per question of their task.
    """
    from memrl.envs import make_env
    from memrl.methods.mem1.prompts import render_observation, render_prompt

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
