"""A scripted reference agent for synthetic doc-QA tasks (no model).

It plays the env through the same strings a model would: it reads the questions, searches for each
hop of each question (the subject's name plus keywords of the fact), reads the returned passages,
extracts the fact from the passage titled with the subject, and answers all questions in one
``<answer>`` block. It proves the synthetic tasks are solvable with the env's retrieval, and gives
tests and benchmarks a driver that needs no model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from memrl.envs.doc_qa.kb_schema import RELATIONS, extract_fact, parse_question
from memrl.envs.text import TextTags

UNKNOWN = "unknown"
_DOC = re.compile(r"^Doc \d+\(Title: (?P<title>.*?)\) (?P<text>.*)$", re.M)
_TURNS_LEFT = re.compile(r"\[HINT\]You have (\d+) turns? left")


@dataclass
class _Plan:
    relations: list[str]
    subject: str
    hop: int = 0
    attempts: int = 0
    answer: str | None = None
    trail: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.answer is not None


class ScriptedAgent:
    """Answers synthetic-KB questions by searching and reading, turn by turn.

    Args:
        tags: the env's tag names.
        max_attempts: searches per hop before the agent gives up on a question.
    """

    def __init__(self, tags: TextTags | None = None, max_attempts: int = 2) -> None:
        self.tags = tags or TextTags()
        self.max_attempts = max_attempts
        self._plans: list[_Plan] = []
        self._turns_left = 0
        self._current: int | None = None

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """Starts on a task from the env's reset output."""
        self._plans = []
        for question in info["task"]["questions"]:
            parsed = parse_question(question)
            if parsed is None:  # not a synthetic question: nothing to plan
                self._plans.append(_Plan([], "", answer=UNKNOWN))
            else:
                self._plans.append(_Plan(parsed[0], parsed[1]))
        self._turns_left = int(info["max_turns"])
        self._current = None

    def act(self, observation: str | None = None) -> str:
        """The next response: a search for the next open hop, or the answer block."""
        if observation:
            self._read(observation)
        pending = [i for i, plan in enumerate(self._plans) if not plan.done]
        if not pending or self._turns_left <= 1:
            return self._answer()
        self._current = pending[0]
        plan = self._plans[pending[0]]
        relation = RELATIONS[plan.relations[plan.hop]]
        query = plan.subject if plan.attempts else f"{plan.subject} {relation.keywords}"
        return self._say(f"Looking up {relation.name} of {plan.subject}.", self.tags.search, query)

    def _read(self, observation: str) -> None:
        left = _TURNS_LEFT.search(observation)
        self._turns_left = int(left.group(1)) if left else 0
        if self._current is None:
            return
        plan = self._plans[self._current]
        relation = plan.relations[plan.hop]
        value = None
        for match in _DOC.finditer(observation):
            if match.group("title").strip().lower() == plan.subject.lower():
                value = extract_fact(relation, plan.subject, match.group("text"))
                if value is not None:
                    break
        if value is None:
            plan.attempts += 1
            if plan.attempts >= self.max_attempts:
                plan.answer = UNKNOWN
            return
        plan.trail.append(value)
        plan.attempts = 0
        if plan.hop + 1 < len(plan.relations):
            plan.hop += 1
            plan.subject = value
        else:
            plan.answer = value

    def _answer(self) -> str:
        answers = [plan.answer or UNKNOWN for plan in self._plans]
        return self._say("Answering every question.", self.tags.answer, "; ".join(answers))

    def _say(self, note: str, tag: str, body: str) -> str:
        known = "; ".join(
            f"Q{i + 1}: {plan.answer or ' -> '.join(plan.trail) or 'open'}"
            for i, plan in enumerate(self._plans)
        )
        state = self.tags.state
        return f"<{state}>{known}. {note}</{state}>\n<{tag}>{body}</{tag}>"


def run_episode(env, agent: ScriptedAgent, **reset_kwargs: Any) -> dict[str, Any]:
    """Plays one episode; returns the last info plus ``reward`` and ``turns``."""
    observation, info = env.reset(**reset_kwargs)
    agent.reset(observation, info)
    observation = None
    total, turns = 0.0, 0
    while True:
        observation, reward, terminated, truncated, info = env.step(agent.act(observation))
        total += reward
        turns += 1
        if terminated or truncated:
            return {**info, "reward": total, "turns": turns}
