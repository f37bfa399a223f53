"""Prompt templates and the turn format of LLM text agents (QA and WebShop).

``PromptSettings`` holds what the context policies need to turn an env's text into token ids: the
task prompt template, the tag names, how observations are appended, and which chat template wraps
the prompt. ``render_prompt`` and ``render_observation`` are the only places where text becomes a
prompt, for rollout, warm start and benchmarks alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from memrl.envs.text import TextTags

QA_TEMPLATE = (
    "Answer the questions below by iterative reasoning, summarization and search. "
    "At every step, first write inside <{state}> </{state}> an updated, cumulative and concise "
    "summary of what you know: it is your only persistent memory, so it must carry every essential "
    "fact from your previous summary and from the new information. Then EITHER issue one keyword "
    "query for one unanswered question inside <{search}> </{search}>, OR, when every question is "
    "answered, give all answers inside <{answer}> </{answer}>, in the order of the questions and "
    "separated by semicolons, e.g. <{answer}> a1; a2 </{answer}>. Keep each answer concise.\n"
    "Questions: {task}"
)
"""The MEM1 QA prompt (our wording); ``{task}`` is the env's first observation (questions joined by
"; "), the other fields are tag names."""

WEBSHOP_TEMPLATE = (
    "You are shopping on a web store for the customer's instruction below. Every turn, reply with "
    "exactly one <think> </think> block of scratch reasoning (it is dropped afterwards), one "
    "<{summary}> </{summary}> block with a cumulative summary of everything you need to remember "
    "(your only persistent memory), and one <{answer}> </{answer}> block holding one action: "
    "search[keywords] or click[an available action].\n{task}"
)
"""The MEM1 WebShop prompt (our wording); ``{task}`` is the first page inside the state block."""

CHAT_TEMPLATES = ("auto", "plain", "none")


@dataclass(frozen=True)
class PromptSettings:
    """How env text becomes the model's prompt and context segments."""

    format: Literal["qa", "webshop"] = "qa"
    """Turn format: ``qa`` (state + search|answer) or ``webshop`` (think + summary + answer)."""
    template: str | None = None
    """Prompt template overriding the format's default; fields: {task} and the tag names."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tag names overriding the defaults (keys: state, search, answer, information, summary)."""
    observation_template: str = "\n{observation}\n"
    """How an observation is appended after a turn's generation."""
    chat_template: Literal["auto", "plain", "none"] = "auto"
    """``auto``: the tokenizer's chat template when it has one, else ``plain``; ``plain``:
    "<|user|>\\n...\\n<|assistant|>\\n"; ``none``: the raw prompt."""

    def validate(self, where: str) -> None:
        allowed = {"state", "search", "answer", "information", "summary"}
        unknown = sorted(set(self.tags) - allowed)
        if unknown:
            raise ValueError(
                f"{where}.tags has unknown key(s) {unknown}; allowed: {sorted(allowed)}"
            )

    def tag(self, name: str) -> str:
        defaults = {**vars(TextTags()), "summary": "summary"}
        return self.tags.get(name, defaults[name])

    def text_tags(self) -> TextTags:
        return TextTags(
            state=self.tag("state"),
            search=self.tag("search"),
            answer=self.tag("answer"),
            information=self.tag("information"),
        )

    def stop_strings(self, last_turn: bool) -> list[str]:
        """Generation stops after the action tag closes (the stop string is kept)."""
        answer = f"</{self.tag('answer')}>"
        if self.format == "webshop" or last_turn:
            return [answer]
        return [f"</{self.tag('search')}>", answer]

    def scratch_tag(self) -> str | None:
        """The tag whose block pruning policies drop from later contexts (WebShop's think)."""
        return "think" if self.format == "webshop" else None

    def all_tag_strings(self) -> list[str]:
        names = ["state", "search", "answer", "information", "summary"]
        tags = sorted({self.tag(n) for n in names} | {"think"})
        return [s for t in tags for s in (f"<{t}>", f"</{t}>")]


def check_tags(prompt: PromptSettings, env_config: dict[str, Any]) -> None:
    """Raises ValueError when the prompt's tag names differ from those the env parses.

    A prompt that asks for ``<IS>`` while the env looks for ``<think>`` makes every episode end
    in a format error with reward 0, so the two must agree before anything runs. QA envs take
    ``env.config.tags`` (``TextTags`` keys); WebShop takes ``summary_tag`` and ``answer_tag``.
    """
    if prompt.format == "webshop":
        env = {
            "summary": env_config.get("summary_tag", "summary"),
            "answer": env_config.get("answer_tag", "answer"),
        }
        mine = {name: prompt.tag(name) for name in env}
        fix = "set env.config.summary_tag / answer_tag and algorithm.prompt.tags alike"
    else:
        env_tags = env_config.get("tags") or {}
        if not isinstance(env_tags, dict):
            return  # the env rejects it with its own message
        env = vars(TextTags(**{k: v for k, v in env_tags.items() if k in vars(TextTags())}))
        mine = vars(prompt.text_tags())
        wanted = {k: v for k, v in mine.items() if v != vars(TextTags())[k]}
        fix = f"set env.config.tags to {wanted or {}} (the same names as algorithm.prompt.tags)"
    differ = {k: (mine[k], env[k]) for k in env if mine[k] != env[k]}
    if differ:
        pairs = ", ".join(f"{k}: prompt <{a}> vs env <{b}>" for k, (a, b) in differ.items())
        raise ValueError(
            f"the prompt's tag names differ from the env's ({pairs}): the model would write "
            f"tags the env does not parse and every episode would end in a format error; {fix}"
        )


def render_prompt(settings: PromptSettings, task: str, tokenizer: Any | None = None) -> str:
    """The prompt text of a task (chat template applied)."""
    template = settings.template or (QA_TEMPLATE if settings.format == "qa" else WEBSHOP_TEMPLATE)
    names = ("state", "search", "answer", "information", "summary")
    content = template.format(task=task, **{n: settings.tag(n) for n in names})
    mode = settings.chat_template
    if mode == "auto":
        has_template = tokenizer is not None and getattr(tokenizer, "chat_template", None)
        mode = "chat" if has_template else "plain"
    if mode == "chat":
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
    if mode == "plain":
        return f"<|user|>\n{content}\n<|assistant|>\n"
    return content


def render_observation(settings: PromptSettings, observation: str) -> str:
    return settings.observation_template.format(observation=observation)
