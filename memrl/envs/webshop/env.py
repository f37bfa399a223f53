"""``memrl/WebShop-v0``: the WebShop text env (memrl's text-env protocol, MEM1 turn format).

With ``action_format="mem1"`` (default) an action is the model's whole turn,
``<think>..</think><summary>..</summary><answer>search[..] | click[..]</answer>`` with exactly one
of each tag (else reward ``format_penalty`` and the episode ends), and the observation is
``<state>[HINT]You have k turns left.[/HINT] page text Current available actions: [...]</state>``.
With ``action_format="raw"`` actions are bare ``search[...]`` / ``click[...]`` strings and the
observation is the page text alone (the original's text mode). Invalid page actions are no-ops
with a message, the episode is truncated after ``max_turns`` actions, and ``click[buy now]``
ends it with the WebShop reward. An action longer than ``max_action_chars`` is refused unparsed:
a malformed turn in the MEM1 format, an invalid no-op in the raw format.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from memrl.envs.text import (
    INFO_SUCCESS,
    MAX_ACTION_CHARS,
    action_text,
    clean_text,
    pick_task,
    text_space,
    turns_left_hint,
)
from memrl.envs.webshop.engine import OBSERVATION_MODES, Session, StepResult, WebShopEngine
from memrl.envs.webshop.world import CatalogueSpec, get_world

ACTION_FORMATS = ("mem1", "raw")
PAGE_ACTIONS = ("search[", "click[")


def parse_mem1_turn(action: str, think: str, summary: str, answer: str) -> str | None:
    """The stripped answer of a well-formed MEM1 turn, else None.

    Well-formed: ``<think>..</think><summary>..</summary><answer>..</answer>`` with only
    whitespace around and between the blocks, each opening tag exactly once, and an answer of the
    form ``search[..]`` or ``click[..]``. Each block ends at the closing tag right before the next
    block (or, for the answer, at the end), so the scan is linear in the action's length.
    """
    openings = [f"<{think}>", f"<{summary}>", f"<{answer}>"]
    closings = [f"</{think}>", f"</{summary}>", f"</{answer}>"]
    if any(action.count(tag) != 1 for tag in openings):
        return None
    starts = [action.find(tag) for tag in openings]
    if action[: starts[0]].strip():
        return None
    bounds = [*starts[1:], len(action)]
    content = ""
    for start, opening, closing, bound in zip(starts, openings, closings, bounds, strict=True):
        begin = start + len(opening)
        block = action[begin:bound].rstrip() if begin <= bound else ""
        if begin > bound or not block.endswith(closing):
            return None
        content = block[: len(block) - len(closing)]
    content = content.strip()
    arg_start = next((len(p) for p in PAGE_ACTIONS if content.startswith(p)), 0)
    if not arg_start or not content.endswith("]") or len(content) < arg_start + 2:
        return None
    return content


class WebShopEnv(gym.Env):
    """WebShop as a text env (see the module docstring).

    Args:
        data_dir: folder of the WebShop files (real or from ``memrl data webshop``); None builds a
            synthetic catalogue of ``num_products`` in memory.
        num_products: synthetic size, or the first N products of real files (None = all).
        seed: catalogue / price seed.
        human_goals: human instructions (the benchmark) or synthetic goals.
        split: ``test`` (goals 0-499), ``eval`` (500-1499), ``train`` (1500+) or ``all``.
        observation_mode: ``text`` or ``text_rich``.
        action_format: ``mem1`` or ``raw`` (see the module docstring).
        max_turns: actions per episode before truncation (MEM1 uses 10).
        format_penalty: reward of a malformed MEM1 turn (ends the episode).
        show_attrs: show the ``attributes`` sub-page button, as the original's option.
        backend: ``local`` (one world per process) or ``ray`` (a named Ray actor serves it).
        service_name: name of the Ray actor for ``backend="ray"``.
        think_tag, summary_tag, answer_tag, state_tag: tag names of the MEM1 format.
        max_action_chars: longer actions are refused unparsed (see the module docstring).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        data_dir: str | None = None,
        num_products: int | None = 1000,
        seed: int = 0,
        human_goals: bool = True,
        split: str = "train",
        observation_mode: str = "text",
        action_format: str = "mem1",
        max_turns: int = 10,
        format_penalty: float = -1.0,
        show_attrs: bool = False,
        backend: str = "local",
        service_name: str = "memrl_webshop",
        think_tag: str = "think",
        summary_tag: str = "summary",
        answer_tag: str = "answer",
        state_tag: str = "state",
        max_action_chars: int = MAX_ACTION_CHARS,
    ) -> None:
        if observation_mode not in OBSERVATION_MODES:
            raise ValueError(
                f"observation_mode={observation_mode!r} is not one of {OBSERVATION_MODES}."
            )
        if action_format not in ACTION_FORMATS:
            raise ValueError(f"action_format={action_format!r} is not one of {ACTION_FORMATS}.")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}.")
        if isinstance(max_action_chars, bool) or not isinstance(max_action_chars, int):
            raise ValueError(f"max_action_chars must be an int, got {max_action_chars!r}.")
        if max_action_chars < 1:
            raise ValueError(f"max_action_chars must be >= 1, got {max_action_chars}.")
        spec = CatalogueSpec(
            data_dir=data_dir, num_products=num_products, seed=seed, human_goals=human_goals
        )
        if backend == "local":
            self.world = get_world(spec)
        elif backend == "ray":
            from memrl.envs.webshop.service import RemoteWorld

            self.world = RemoteWorld.connect(spec, name=service_name)
        else:
            raise ValueError(f"backend={backend!r} is not one of ('local', 'ray').")
        self.split = split
        self.task_indices = self.world.split(split)
        if len(self.task_indices) == 0:
            raise ValueError(
                f"Split {split!r} is empty: the catalogue has {self.world.num_goals()} goals "
                "(test = 0-499, eval = 500-1499, train = 1500+). Use a larger catalogue or "
                "split='all'."
            )
        self.engine = WebShopEngine(self.world, show_attrs=show_attrs)
        self.observation_mode = observation_mode
        self.action_format = action_format
        self.max_turns = max_turns
        self.format_penalty = format_penalty
        self.max_action_chars = max_action_chars
        self.tags = {
            "think": think_tag,
            "summary": summary_tag,
            "answer": answer_tag,
            "state": state_tag,
        }
        self.observation_space = text_space()
        self.action_space = text_space()
        self.session: Session | None = None
        self.turn = 0
        self.task_index = 0

    # --- gymnasium API -----------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        i = pick_task(self.np_random, options, len(self.task_indices), f"split {self.split!r}")
        self.task_index = i
        goal_index = self.task_indices[i]
        goal = self.world.goal(goal_index)
        self.session = self.engine.new_session(goal, session_id=f"{self.split}-{i}")
        self.turn = 0
        info = {
            "task_id": f"webshop/{self.split}/{i}",
            "task": {"instruction": goal["instruction_text"], "goal_index": goal_index},
            "max_turns": self.max_turns,
            "available_actions": self.available_actions(),
        }
        return self._observation(), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.session is None:
            raise RuntimeError("Call reset() before step().")
        self.turn += 1
        info: dict[str, Any] = {"format_error": False, "score": 0.0, INFO_SUCCESS: False}
        text, refused = action_text(action, self.max_action_chars)
        if self.action_format == "mem1":
            tags = (self.tags["think"], self.tags["summary"], self.tags["answer"])
            answer = None if refused else parse_mem1_turn(text, *tags)
            if answer is None:
                message = refused or self._format_help()
                info.update(format_error=True, valid=False, message=message)
                obs = self._wrap(refused or f"Invalid response format. {self._format_help()}")
                return obs, float(self.format_penalty), True, False, info
            text = answer
        if refused is None:
            result = self.engine.step(self.session, text)
        else:
            result = StepResult(0.0, False, False, refused)
        info.update(valid=result.valid, message=result.message)
        if result.done and result.valid:
            info.update(
                {INFO_SUCCESS: result.reward == 1.0},
                score=result.reward,
                reward_info=self.session.reward_info,
                purchased=self.session.asin,
                options=dict(self.session.options),
            )
        truncated = not result.done and self.turn >= self.max_turns
        info["available_actions"] = self.available_actions()
        return self._observation(result.message), float(result.reward), result.done, truncated, info

    # --- helpers -----------------------------------------------------------------------------

    def available_actions(self) -> dict[str, Any]:
        """``{"has_search_bar": bool, "clickables": [str]}`` of the current page."""
        return self.engine.available_actions(self.session)

    def page_text(self) -> str:
        """The current page in this env's observation mode (no MEM1 wrapping)."""
        return self.engine.observation(self.session, self.observation_mode)

    def _observation(self, message: str = "") -> str:
        page = self.page_text()
        if self.action_format == "raw":
            return clean_text(page)
        return self._wrap(page, message)

    def _wrap(self, page: str, message: str = "") -> str:
        hint = turns_left_hint(
            self.max_turns - self.turn,
            "Your next action is the last: click[buy now] on an item page to purchase.",
        )
        acts = self.available_actions() if self.session is not None else {"clickables": []}
        listed = (["search[<keywords>]"] if acts.get("has_search_bar") else []) + [
            f"click[{c}]" for c in acts["clickables"] if c != "search"
        ]
        note = f"Invalid action: {message}\n" if message else ""
        st = self.tags["state"]
        return clean_text(
            f"<{st}>{hint}\n{note}{page}\nCurrent available actions: [{', '.join(listed)}]</{st}>"
        )

    def _format_help(self) -> str:
        t = self.tags
        return (
            f"Respond with exactly <{t['think']}>...</{t['think']}><{t['summary']}>..."
            f"</{t['summary']}><{t['answer']}>search[keywords] or click[element]"
            f"</{t['answer']}>."
        )
