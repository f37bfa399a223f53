"""Warm-start data: the scripted doc-QA agent's episodes, rendered as the model would produce them.

The scripted agent (memrl/envs/doc_qa/agent.py) plays train-split tasks through the env; each of
its responses is tokenized as that turn's generated ids and each observation through the same
prompt settings, so the resulting ``TextEpisode``s go through the same context policy and sequence
layout as RL rollouts. Supervised fine-tuning on them gives small models a sensible start.
"""

from __future__ import annotations

from typing import Any

from memrl.methods.mem1.context import ContextPolicy, Turn, context_ids
from memrl.methods.mem1.prompts import PromptSettings, render_observation, render_prompt
from memrl.methods.mem1.rollout import TextEpisode
from memrl.metrics import TurnTokens


def scripted_episodes(
    env_id: str,
    env_config: dict[str, Any],
    tokenizer: Any,
    *,
    policy: ContextPolicy,
    prompt: PromptSettings,
    episodes: int,
    task_offset: int = 0,
    max_obs_tokens: int = 1024,
) -> list[TextEpisode]:
    """``episodes`` scripted episodes on task_index task_offset, task_offset + 1, ...

    Raises:
        ValueError: the env has no scripted agent (only doc-QA has one).
    """
    from memrl.envs import make_env

    if env_id != "memrl/DocQA-v0":
        raise ValueError(
            f"warm start needs the scripted doc-QA agent; env {env_id!r} has none. "
            "Set algorithm.warm_start.episodes: 0 or use memrl/DocQA-v0."
        )
    from memrl.envs.doc_qa.agent import ScriptedAgent

    env = make_env(env_id, env_config)
    agent = ScriptedAgent(prompt.text_tags())
    out = []
    try:
        num_tasks = len(env.unwrapped.tasks)
        for k in range(episodes):
            obs, info = env.reset(options={"task_index": (task_offset + k) % num_tasks})
            agent.reset(obs, info)
            ep = TextEpisode(
                task_id=str(info["task_id"]),
                group_id=str(info["task_id"]),
                prompt_ids=tokenizer.encode(
                    render_prompt(prompt, obs, tokenizer), add_special_tokens=False
                ),
            )
            observation = None
            while True:
                action = agent.act(observation)
                gen_ids = tokenizer.encode(action, add_special_tokens=False)
                ctx = context_ids(policy, ep.prompt_ids, ep.turns, len(ep.turns))
                turn = Turn(gen_ids=gen_ids)
                ep.turns.append(turn)
                ep.turn_tokens.append(TurnTokens(context=len(ctx), generated=len(gen_ids)))
                observation, reward, terminated, truncated, info = env.step(action)
                ep.env_reward += float(reward)
                if terminated or truncated:
                    break
                turn.obs_ids = tokenizer.encode(
                    render_observation(prompt, observation), add_special_tokens=False
                )[:max_obs_tokens]
            ep.info = {
                k: float(v)
                for k, v in info.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
            out.append(ep)
    finally:
        env.close()
    return out
