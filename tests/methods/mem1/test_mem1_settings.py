"""Mem1Settings from YAML-shaped dicts: the warm start's env overrides."""

from __future__ import annotations

import pytest

from memrl.envs import make_env
from memrl.experiment.dataclass_dicts import from_dict
from memrl.methods.mem1.context import ContextPolicy
from memrl.methods.mem1.settings import Mem1Settings
from memrl.methods.mem1.tiny import build_tokenizer, env_texts
from memrl.methods.mem1.warm_start import scripted_episodes

ENV = {"synthetic_passages": 55, "objectives": 2, "seed": 0, "num_tasks": 30,
       "multi_hop_fraction": 0.0}  # fmt: skip


def test_warm_start_env_overrides_merge_over_the_env_config():
    s = from_dict(
        Mem1Settings, {"warm_start": {"episodes": 3, "env_config": {"test_fraction": 0.5}}}, "a"
    )
    assert s.warm_start.env(ENV) == {**ENV, "test_fraction": 0.5}
    assert from_dict(Mem1Settings, {}, "a").warm_start.env(ENV) == ENV
    with pytest.raises(TypeError, match="a.warm_start.env_config"):
        from_dict(Mem1Settings, {"warm_start": {"env_config": [1]}}, "a")


def test_warm_start_on_part_of_the_train_questions_leaves_the_rest_unseen():
    s = from_dict(Mem1Settings, {"warm_start": {"env_config": {"test_fraction": 0.5}}}, "a")
    tokenizer = build_tokenizer(env_texts("memrl/DocQA-v0", ENV, s.prompt, 5), 600)
    episodes = scripted_episodes(
        "memrl/DocQA-v0",
        s.warm_start.env(ENV),
        tokenizer,
        policy=ContextPolicy("mem1"),
        prompt=s.prompt,
        episodes=30,
    )

    def questions(**overrides):
        env = make_env("memrl/DocQA-v0", {**ENV, **overrides})
        return {task.task_id: task.questions for task in env.unwrapped.tasks}

    imitated = questions(test_fraction=0.5)
    seen = set()
    for ep in episodes:  # the prompts the warm start trained on hold those tasks' questions
        assert all(q in tokenizer.decode(ep.prompt_ids) for q in imitated[ep.task_id])
        seen.update(imitated[ep.task_id])
    rl_train = {q for qs in questions().values() for q in qs}  # test_fraction 0.2: RL's tasks
    held_out = {q for qs in questions(split="test").values() for q in qs}
    assert seen and not seen & held_out
    assert rl_train - seen  # RL meets train questions the warm start never showed


def test_extra_evaluation_sets_are_checked():
    ok = {"unseen_tasks": {"env_config": {"split": "train"}, "task_offset": 1000}}
    from_dict(Mem1Settings, {"eval_extra": ok}, "a").validate("a")
    for bad in (
        {"unseen": {"task_offset": -1}},
        {"unseen": {"task_offset": 1.5}},
        {"unseen": {"env_config": [1]}},
        {"unseen": {"env": {}}},
        {"not a name": {}},
    ):
        with pytest.raises((ValueError, TypeError), match=r"a\.eval_extra"):
            from_dict(Mem1Settings, {"eval_extra": bad}, "a").validate("a")


def _experiment(prompt_tags=None, env_tags=None, fmt="qa", **env):
    from memrl.experiment.config import parse_config

    config = {"synthetic_passages": 55, **env}
    if env_tags is not None:
        config["tags"] = env_tags
    prompt = {"format": fmt, **({"tags": prompt_tags} if prompt_tags else {})}
    return parse_config(
        {
            "env": {"id": "memrl/DocQA-v0", "config": config},
            "algorithm": {"name": "mem1", "prompt": prompt},
            "model": {"type": "llm", "path": "tiny"},
            "resources": {"num_envs_per_env_runner": 2},
        }
    )


def test_prompt_and_env_tags_must_agree_when_the_config_is_built():
    exp = _experiment(prompt_tags={"state": "IS"})
    with pytest.raises(ValueError, match=r"state: prompt <IS> vs env <think>.*env\.config\.tags"):
        exp.algorithm.make_algorithm_config(exp)
    exp = _experiment(env_tags={"search": "query"})
    with pytest.raises(ValueError, match=r"search: prompt <search> vs env <query>"):
        exp.algorithm.make_algorithm_config(exp)
    # the same names on both sides pass
    exp = _experiment(prompt_tags={"state": "IS"}, env_tags={"state": "IS"})
    assert exp.algorithm.make_algorithm_config(exp).mem1.prompt.tag("state") == "IS"


def test_webshop_tags_are_checked_against_its_own_keys():
    from memrl.methods.mem1.prompts import PromptSettings, check_tags

    check_tags(PromptSettings(format="webshop"), {"summary_tag": "summary"})
    with pytest.raises(ValueError, match="summary: prompt <summary> vs env <mem>"):
        check_tags(PromptSettings(format="webshop"), {"summary_tag": "mem"})


def test_fsdp_needs_several_learners_and_no_lora():
    from memrl.experiment.config import parse_config

    def exp(learners, lora):
        return parse_config(
            {
                "env": {"id": "memrl/DocQA-v0", "config": {"synthetic_passages": 55}},
                "algorithm": {"name": "mem1", "fsdp": True},
                "model": {"type": "llm", "path": "tiny", "lora": {"enabled": lora}},
                "resources": {"num_envs_per_env_runner": 2, "num_learners": learners},
            }
        )

    for learners, lora, message in ((1, False, "num_learners >= 2"), (2, True, "DDP")):
        e = exp(learners, lora)
        with pytest.raises(ValueError, match=message):
            e.algorithm.make_algorithm_config(e)
