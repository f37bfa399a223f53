"""Shared MEM1 test pieces: a tiny model folder for doc-QA and the RLlib config that uses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memrl.methods.mem1.prompts import PromptSettings

DOC_QA = {"synthetic_passages": 60, "objectives": 2, "seed": 0, "num_tasks": 40, "max_turns": 3}
"""A small synthetic doc-QA world (fast to build, 40 tasks per split)."""


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tokenizer trained on doc-QA text and a random 2-layer Qwen2-shaped model, saved once."""
    from memrl.methods.mem1.tiny import TinyModelSettings, env_texts, make_tiny_checkpoint

    prompt = PromptSettings()
    texts = env_texts("memrl/DocQA-v0", DOC_QA, prompt, 10)
    shape = TinyModelSettings(vocab_size=400, hidden_size=32, intermediate_size=64, num_layers=2)
    return make_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny_lm") / "model", texts, prompt.all_tag_strings(), shape
    )


def _mem1_config(
    model_dir: Path, *, resources: dict | None = None, model: dict | None = None, **algorithm: Any
) -> Any:
    """The ``Mem1Config`` of a doc-QA experiment on ``model_dir`` (built as ``memrl train``
    builds it), with algorithm settings, model settings and resources overridden."""
    from memrl.experiment.build import build_algorithm_config
    from memrl.experiment.config import parse_config

    exp = parse_config(
        {
            "name": "mem1_test",
            "env": {"id": "memrl/DocQA-v0", "config": dict(DOC_QA)},
            "algorithm": {"name": "mem1", "max_tokens_per_turn": 4, **algorithm},
            "model": {"type": "llm", "path": str(model_dir), "dtype": "float32", **(model or {})},
            "resources": {"num_env_runners": 0, "num_envs_per_env_runner": 4, **(resources or {})},
        }
    )
    return build_algorithm_config(exp)


def _build_learner(model_dir: Path, **algorithm: Any) -> Any:
    from ray.rllib.core import DEFAULT_MODULE_ID

    from memrl.envs.text import text_space

    config = _mem1_config(model_dir, **algorithm)
    space = text_space()
    return config.build_learner(spaces={DEFAULT_MODULE_ID: (space, space)})


@pytest.fixture(scope="session")
def mem1_config_on():
    """mem1_config_on(model_dir, resources=None, **algorithm): the ``Mem1Config`` of a doc-QA
    experiment on any model folder (session-scoped, for module-scoped fixtures)."""
    return _mem1_config


@pytest.fixture
def mem1_config(tiny_model_dir):
    """mem1_config(resources=None, **algorithm): the ``Mem1Config`` of a doc-QA experiment on
    the tiny model, built as ``memrl train`` builds it."""
    return lambda **kw: _mem1_config(tiny_model_dir, **kw)


@pytest.fixture
def make_learner(tiny_model_dir):
    """make_learner(model=None, **algorithm): a real ``TokenLearner`` built in this process (no
    Ray)."""
    return lambda **kw: _build_learner(tiny_model_dir, **kw)
