"""Learners score tokens at the sampling temperature, so behaviour and learner log-probs agree."""

import numpy as np
import pytest
import torch

from memrl.methods.mem1.context import ContextPolicy, Turn, per_turn_units
from memrl.methods.mem1.generation import GenerationSettings, make_backend
from memrl.methods.mem1.network import TokenPolicy
from memrl.methods.mem1.prompts import PromptSettings, render_observation, render_prompt
from memrl.methods.mem1.tiny import TinyModelSettings, build_tiny_model, build_tokenizer

PROMPT = PromptSettings()
TEXTS = ["Where was Fernosbil born? <think>open</think><search>Fernosbil born</search>"] * 20


@pytest.fixture(scope="module")
def sharp():
    """A tiny model with large weights (peaked distributions, where temperature matters)."""
    torch.manual_seed(0)
    tok = build_tokenizer(TEXTS, 300, PROMPT.all_tag_strings())
    lm = build_tiny_model(len(tok), TinyModelSettings(hidden_size=32, intermediate_size=64))
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if p.ndim == 2 and "embed" not in name:
                p.mul_(6.0)
    return tok, lm.eval()


def _gaps(tok, lm, sample_t: float, score_t: float) -> np.ndarray:
    backend = make_backend(GenerationSettings(temperature=sample_t, seed=3), lm, tok)
    policy = TokenPolicy(lm, value_head=False, temperature=score_t).eval()
    prompt = tok.encode(render_prompt(PROMPT, "Where was Fernosbil born?"))
    turns = []
    for j in range(2):
        ctx = prompt if not turns else prompt + turns[-1].gen_ids + turns[-1].obs_ids
        gen = backend.generate([ctx], [PROMPT.stop_strings(False)], 12)[0]
        obs = tok.encode(render_observation(PROMPT, f"<information>turn {j}</information>"))
        turns.append(Turn(gen_ids=gen.ids, logps=gen.logps, obs_ids=obs))
    gaps = []
    for unit in per_turn_units(ContextPolicy("mem1"), prompt, turns):
        t = {k: torch.as_tensor(getattr(unit, k))[None] for k in ("input_ids", "position_ids")}
        with torch.no_grad():
            lp = policy.score(
                t["input_ids"], t["position_ids"], torch.as_tensor(unit.seg)[None],
                torch.as_tensor(unit.vis)[None],
            )["logp"][0].numpy()  # fmt: skip
        gaps.append(np.abs(lp[unit.loss_mask] - unit.behaviour_logp[unit.loss_mask]))
    return np.concatenate(gaps)


def test_scores_at_the_sampling_temperature_match_the_behaviour_log_probs(sharp):
    tok, lm = sharp
    assert _gaps(tok, lm, 0.6, 0.6).max() < 1e-4
    # Scored at another temperature they describe another distribution.
    assert _gaps(tok, lm, 0.6, 1.0).mean() > 0.05


def test_the_rlmodule_takes_its_temperature_from_generation(tmp_path, sharp):
    from memrl.methods.mem1.generation.base import GenerationSettings

    assert GenerationSettings(temperature=0.7).training_temperature == 0.7
    assert GenerationSettings(temperature=0.0).training_temperature == 1.0  # greedy settings
    tok, lm = sharp
    with pytest.raises(ValueError, match="temperature must be > 0"):
        TokenPolicy(lm, value_head=False, temperature=0.0)
