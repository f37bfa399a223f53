"""Multi-turn rollout of a batch of text envs with one LLM (shared by training and benchmarks).

``rollout`` steps several text envs together (see memrl/envs/text.py): per turn it builds each
active env's context with the context policy, generates for all of them in one backend call,
fetches the searches of all envs that search one index in one retriever call (one request to a
retrieval server per turn, not one per env), hands each generated text to its env, and records
the turn's token ids, behaviour log-probs and memory figures. ``TextEnvRunner`` (training),
``memrl bench mem1-context`` and evaluation all call it, so a figure means the same thing
wherever it is reported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memrl.envs.text import INFO_SUCCESS
from memrl.methods.mem1.context import ContextPolicy, Turn, context_ids
from memrl.methods.mem1.prompts import PromptSettings, render_observation, render_prompt
from memrl.metrics import TurnTokens, episode_memory_metrics

logger = logging.getLogger(__name__)


@dataclass
class TextEpisode:
    """One finished episode of a text env, as tokens (what the learners train on)."""

    task_id: str
    """The env's task id (GRPO groups by it)."""
    group_id: str
    """The GRPO group: rollouts of the same task drawn together (never across tasks)."""
    prompt_ids: list[int]
    """The task prompt's token ids (chat template applied)."""
    turns: list[Turn] = field(default_factory=list)
    """Each turn's generated ids, log-probs and observation ids."""
    turn_tokens: list[TurnTokens] = field(default_factory=list)
    """Context and generated token counts per turn."""
    env_reward: float = 0.0
    """Sum of the env's rewards (QA: summed EM of the answer; WebShop: score)."""
    format_errors: int = 0
    """Turns whose action the env could not parse."""
    info: dict[str, float] = field(default_factory=dict)
    """The env's outcome metrics of the last step (QA: em, f1, num_searches)."""
    seconds: float = 0.0
    """Wall time of the rollout batch divided by its episodes."""
    truncated: bool = False
    """Ended by the turn limit instead of an answer."""

    def __len__(self) -> int:
        return len(self.turns)

    @property
    def is_done(self) -> bool:
        """Always true: the rollout returns finished episodes only (RLlib episode protocol)."""
        return True

    def get_return(self) -> float:
        return self.env_reward

    def get_infos(self) -> list[dict[str, float]]:
        return [self.info]

    def memory_metrics(self) -> dict[str, float]:
        return episode_memory_metrics(self.turn_tokens)


def outcome_info(info: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of a step's info as floats (flags such as WebShop's ``success`` as
    1.0 / 0.0); what ``TextEpisode.info`` keeps of the last step."""
    return {k: float(v) for k, v in info.items() if isinstance(v, int | float)}


def episode_success(ep: TextEpisode) -> bool:
    """Whether an episode solved its task outright: the env reported ``success``, it ended by
    its own action (not the turn limit) and no turn had a format error. Doc-QA: every question
    answered exactly; WebShop: reward 1. A partly right answer ("1931; 1931" for two questions
    with one right) is not a success."""
    solved = ep.info.get(INFO_SUCCESS, 0.0) >= 1.0
    return solved and ep.format_errors == 0 and not ep.truncated


def find_scratch(tokenizer: Any, ids: Sequence[int], tag: str) -> tuple[int, int] | None:
    """Token span [a, b) covering the first ``<tag>...</tag>`` block of ``ids`` (None: no block)."""
    text = tokenizer.decode(list(ids))
    open_, close = f"<{tag}>", f"</{tag}>"
    start = text.find(open_)
    end = text.find(close, start + 1) if start >= 0 else -1
    if start < 0 or end < 0:
        return None
    end += len(close)

    def first_prefix_longer_than(chars: int) -> int:
        lo, hi = 0, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(tokenizer.decode(list(ids[: mid + 1]))) > chars:
                hi = mid
            else:
                lo = mid + 1
        return lo

    a = first_prefix_longer_than(start)
    b = first_prefix_longer_than(end - 1) + 1
    return a, min(b, len(ids))


def prefetch_searches(envs: Sequence[Any], actions: Sequence[str]) -> int:
    """Fetches, before the envs step, the searches these actions make: one ``retrieve`` call per
    index the envs share (envs exposing ``search_request``/``prefetch``, e.g. doc-QA); returns
    the number of calls made."""
    groups: dict[Any, list[tuple[Any, Any]]] = {}
    for env, action in zip(envs, actions, strict=True):
        base = env.unwrapped
        ask = getattr(base, "search_request", None)
        request = ask(action) if ask is not None else None
        if request is not None:
            groups.setdefault((request.key, request.topk), []).append((base, request))
    for (_, topk), items in groups.items():
        queries = [request.query for _, request in items]
        hits = items[0][1].retriever.retrieve(queries, topk)
        for (base, request), found in zip(items, hits, strict=True):
            base.prefetch(request.query, found)
    return len(groups)


def transcript(ep: TextEpisode, tokenizer: Any) -> dict[str, Any]:
    """One episode as text: the prompt, then per turn the context size, what the model wrote
    and what the env answered; with its outcome and memory figures (a JSON-able dict)."""
    return {
        "task_id": ep.task_id,
        "prompt": tokenizer.decode(ep.prompt_ids),
        "turns": [
            {
                "context_tokens": counts.context,
                "generated": tokenizer.decode(turn.gen_ids),
                "observation": tokenizer.decode(turn.obs_ids),
            }
            for turn, counts in zip(ep.turns, ep.turn_tokens, strict=True)
        ],
        "reward": ep.env_reward,
        "format_errors": ep.format_errors,
        "truncated": ep.truncated,
        **ep.info,
        **ep.memory_metrics(),
    }


def rollout(
    envs: Sequence[Any],
    backend: Any,
    tokenizer: Any,
    *,
    policy: ContextPolicy,
    prompt: PromptSettings,
    max_tokens_per_turn: int,
    max_obs_tokens: int = 1024,
    reset_options: Sequence[dict[str, Any] | None] | None = None,
    group_ids: Sequence[str] | None = None,
    seeds: Sequence[int | None] | None = None,
    greedy: bool = False,
) -> list[TextEpisode]:
    """Runs one episode in each env, all envs generating together; returns the episodes."""
    n = len(envs)
    started = time.perf_counter()
    episodes: list[TextEpisode] = []
    max_turns: list[int] = []
    for i, env in enumerate(envs):
        options = reset_options[i] if reset_options else None
        obs, info = env.reset(seed=seeds[i] if seeds else None, options=options)
        prompt_ids = tokenizer.encode(
            render_prompt(prompt, obs, tokenizer), add_special_tokens=False
        )
        task_id = str(info.get("task_id", i))
        episodes.append(
            TextEpisode(
                task_id=task_id,
                group_id=group_ids[i] if group_ids else task_id,
                prompt_ids=prompt_ids,
            )
        )
        max_turns.append(int(info.get("max_turns", 6)))
    active = list(range(n))
    j = 0
    scratch_tag = prompt.scratch_tag()
    while active:
        contexts = [
            context_ids(policy, episodes[i].prompt_ids, episodes[i].turns, j) for i in active
        ]
        stops = [prompt.stop_strings(last_turn=j >= max_turns[i] - 1) for i in active]
        gens = backend.generate(contexts, stops, max_tokens_per_turn, greedy=greedy)
        prefetch_searches([envs[i] for i in active], [g.text for g in gens])
        still = []
        for i, ctx, gen in zip(active, contexts, gens, strict=True):
            ep = episodes[i]
            turn = Turn(gen_ids=list(gen.ids), logps=list(gen.logps))
            if scratch_tag is not None:
                turn.scratch = find_scratch(tokenizer, turn.gen_ids, scratch_tag)
            ep.turns.append(turn)
            ep.turn_tokens.append(TurnTokens(context=len(ctx), generated=len(gen.ids)))
            obs, reward, terminated, truncated, info = envs[i].step(gen.text)
            ep.env_reward += float(reward)
            ep.format_errors += int(bool(info.get("format_error", False)))
            ep.info = outcome_info(info)
            done = terminated or truncated or j + 1 >= max_turns[i]
            if done:
                ep.truncated = bool(truncated or not terminated)
                continue
            obs_ids = tokenizer.encode(render_observation(prompt, obs), add_special_tokens=False)
            turn.obs_ids = obs_ids[:max_obs_tokens]
            still.append(i)
        active = still
        j += 1
    seconds = (time.perf_counter() - started) / max(1, n)
    for ep in episodes:
        ep.seconds = seconds
    return episodes
