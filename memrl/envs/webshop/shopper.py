"""A scripted shopper: the baseline and the driver of tests and benchmarks.

Policy: search with the instruction's keywords (stop words, price clause and filler removed), open
the result whose title and price best match the instruction, click every option value the
instruction names, buy. It reads only what an agent sees (the instruction and pages' elements).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memrl.envs.webshop.engine import BUY_NOW, Session, WebShopEngine
from memrl.envs.webshop.textproc import search_tokens

_PRICE = re.compile(r",?\s*and price lower than ([\d.]+) dollars")
_FILLER = frozenset(
    """a an the and i im am looking need want buy find me which that is are for my family please
    get would like some look with color size flavor scent style pack in of""".split()
)


def instruction_keywords(instruction: str) -> str:
    """The search query the shopper types: the instruction minus price clause and filler words."""
    text = _PRICE.sub("", instruction.lower())
    words = re.findall(r"[a-z0-9][a-z0-9.'-]*", text)
    return " ".join(w for w in words if w not in _FILLER)


def price_limit(instruction: str) -> float | None:
    m = _PRICE.search(instruction.lower())
    return float(m.group(1)) if m else None


@dataclass
class ShopperResult:
    """One scripted episode."""

    reward: float
    success: bool
    steps: int
    actions: list[str]


class ScriptedShopper:
    """Chooses actions for one session from the pages it sees."""

    def __init__(self, engine: WebShopEngine, max_steps: int = 10) -> None:
        self.engine = engine
        self.max_steps = max_steps

    def plan(self, session: Session) -> list[str]:
        """The actions the shopper would take now, from the current page (search page onwards)."""
        instruction = session.goal["instruction_text"]
        if session.page == "search":
            return [f"search[{instruction_keywords(instruction)}]"]
        if session.page == "results":
            links = [e for e in self.engine.elements(session) if e.kind == "link"]
            if not links:
                return ["click[back to search]"]
            best = max(links, key=lambda e: self._score(instruction, e.text))
            return [f"click[{best.value}]"]
        if session.page == "item":
            text = " " + " ".join(re.findall(r"[a-z0-9.'|-]+", instruction.lower())) + " "
            actions, chosen = [], set()
            for e in self.engine.elements(session):
                if e.kind == "option" and e.group not in chosen and f" {e.value} " in text:
                    actions.append(f"click[{e.value}]")
                    chosen.add(e.group)
            return actions + [f"click[{BUY_NOW}]"]
        return []

    def _score(self, instruction: str, asin: str) -> float:
        product = self.engine.world.product(asin)
        want = set(search_tokens(instruction_keywords(instruction)))
        have = set(search_tokens(product["Title"]))
        score = len(want & have) / (len(want) or 1)
        limit = price_limit(instruction)
        if limit is not None and self.engine.world.price(asin) > limit:
            score -= 0.5
        return score

    def run(self, session: Session) -> ShopperResult:
        """Plays a session to the end (or ``max_steps`` actions)."""
        taken: list[str] = []
        reward = 0.0
        while not session.done and len(taken) < self.max_steps:
            planned = self.plan(session)
            if not planned:
                break
            for action in planned:
                if len(taken) >= self.max_steps:
                    break
                taken.append(action)
                result = self.engine.step(session, action)
                reward = result.reward
                if result.done:
                    break
        return ShopperResult(reward, session.done and reward == 1.0, len(taken), taken)


def evaluate_shopper(world: Any, split: str = "test", limit: int | None = None) -> dict[str, float]:
    """Average reward and success rate of the scripted shopper over a split's goals."""
    engine = WebShopEngine(world)
    shopper = ScriptedShopper(engine)
    indices = list(world.split(split))[:limit]
    rewards, successes = [], 0
    for gi in indices:
        result = shopper.run(engine.new_session(world.goal(gi)))
        rewards.append(result.reward)
        successes += result.success
    n = max(1, len(rewards))
    return {"episodes": len(rewards), "avg_reward": sum(rewards) / n, "success_rate": successes / n}
