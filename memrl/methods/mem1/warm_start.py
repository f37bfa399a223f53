"""Warm-start data: a scripted agent's episodes, rendered as the model would produce them.

A scripted agent (doc-QA's searcher, memrl/envs/doc_qa/agent.py, or WebShop's shopper writing MEM1
turns) plays train-split tasks through the env; each of its responses is tokenized as that turn's
generated ids and each observation through the same prompt settings, so the resulting
``TextEpisode``s go through the same context policy and sequence layout as RL rollouts.
Supervised fine-tuning on them gives small models a sensible start.
"""

from __future__ import annotations

from typing import Any

from memrl.methods.mem1.context import ContextPolicy, Turn, context_ids
from memrl.methods.mem1.prompts import PromptSettings, render_observation, render_prompt
from memrl.methods.mem1.rollout import TextEpisode, find_scratch, outcome_info
from memrl.metrics import TurnTokens

SCRIPTED_ENVS = ("memrl/DocQA-v0", "memrl/WebShop-v0")
"""Envs with a scripted agent to imitate."""


class ScriptedShopperTurns:
    """The WebShop scripted shopper (memrl/envs/webshop/shopper.py) writing MEM1 turns.

    Each turn is ``<think>why</think><summary>goal and what is done</summary><answer>action
    </answer>`` with the tag names the env parses; the summary is cumulative (the instruction,
    then each step taken), as MEM1 asks of its kept state.
    """

    def __init__(self, env: Any) -> None:
        from memrl.envs.webshop.shopper import ScriptedShopper

        self.env = env.unwrapped
        self.shopper = ScriptedShopper(self.env.engine)
        self.done: list[str] = []
        self.pending: list[str] = []

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        self.done, self.pending = [], []

    def act(self, observation: str | None = None) -> str:
        session = self.env.session
        if not self.pending:
            self.pending = self.shopper.plan(session) or ["click[back to search]"]
        action = self.pending.pop(0)
        why = {
            "search": "Search with the instruction's keywords.",
            "results": "Open the result that best matches the instruction and the price limit.",
            "item": "Choose the options the instruction names, then buy.",
        }.get(session.page, "Go on.")
        summary = f"Goal: {session.goal['instruction_text']}"
        if self.done:
            summary += " Done: " + "; ".join(self.done) + "."
        self.done.append(action)
        t = self.env.tags
        return (
            f"<{t['think']}>{why}</{t['think']}>\n<{t['summary']}>{summary}</{t['summary']}>\n"
            f"<{t['answer']}>{action}</{t['answer']}>"
        )


def _scripted_agent(env_id: str, env: Any, prompt: PromptSettings) -> Any:
    if env_id == "memrl/DocQA-v0":
        from memrl.envs.doc_qa.agent import ScriptedAgent

        return ScriptedAgent(prompt.text_tags())
    if env_id == "memrl/WebShop-v0":
        return ScriptedShopperTurns(env)
    raise ValueError(
        f"warm start needs a scripted agent; env {env_id!r} has none (those that do: "
        f"{list(SCRIPTED_ENVS)}). Set algorithm.warm_start.episodes: 0."
    )


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
        ValueError: the env has no scripted agent (doc-QA and WebShop have one).
    """
    from memrl.envs import make_env

    if env_id not in SCRIPTED_ENVS:
        _scripted_agent(env_id, None, prompt)  # raises, naming the envs that have one
    env = make_env(env_id, env_config)
    agent = _scripted_agent(env_id, env, prompt)
    scratch_tag = prompt.scratch_tag()
    out = []
    try:
        num_tasks = _num_tasks(env)
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
                if scratch_tag is not None:  # as rollouts mark it: later contexts drop it
                    turn.scratch = find_scratch(tokenizer, gen_ids, scratch_tag)
                ep.turns.append(turn)
                ep.turn_tokens.append(TurnTokens(context=len(ctx), generated=len(gen_ids)))
                observation, reward, terminated, truncated, info = env.step(action)
                ep.env_reward += float(reward)
                if terminated or truncated:
                    break
                turn.obs_ids = tokenizer.encode(
                    render_observation(prompt, observation), add_special_tokens=False
                )[:max_obs_tokens]
            ep.info = outcome_info(info)
            out.append(ep)
    finally:
        env.close()
    return out


def _num_tasks(env: Any) -> int:
    base = env.unwrapped
    if hasattr(base, "tasks"):  # doc-QA
        return len(base.tasks)
    return len(base.task_indices)  # WebShop's goals of its split
