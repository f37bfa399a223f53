"""``memrl/WebSearchQA-v0``: multi-objective QA answered from the live web in a real browser.

Same interface as doc-QA (``memrl/envs/text.py``, MEM1 turn format): the agent writes its state
block, then one action: ``<search>query</search>``, ``<open>N or URL</open>`` (N numbers the
most recent list shown: search results, or the links under an opened page) or
``<answer>a1; a2</answer>``. Every web failure becomes an observation; nothing raises. A
response longer than ``max_action_chars`` ends the episode unparsed, like one with no action.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from memrl.envs.text import (
    MAX_ACTION_CHARS,
    TextTags,
    action_text,
    clean_text,
    echo,
    first_tagged,
    pick_task,
    strip_blocks,
    text_space,
    turns_left_hint,
)
from memrl.envs.web_search.config import (
    BrowserConfig,
    CacheConfig,
    FetchConfig,
    SafetyConfig,
    SearchConfig,
    from_dict,
)
from memrl.envs.web_search.extract import truncate_tokens
from memrl.envs.web_search.tasks import load_tasks
from memrl.envs.web_search.web_client import PageOutcome, SearchOutcome, WebClient

REWARD_METRICS = ("em", "f1")


class WebSearchQAEnv(gym.Env):
    """Question answering over the live web (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        tasks: list[dict[str, Any]] | None = None,
        task_file: str | None = None,
        max_turns: int = 6,
        reward: str = "em",
        tags: dict[str, str] | TextTags | None = None,
        open_tag: str = "open",
        max_query_chars: int = 300,
        max_action_chars: int = MAX_ACTION_CHARS,
        browser: dict[str, Any] | BrowserConfig | None = None,
        safety: dict[str, Any] | SafetyConfig | None = None,
        fetch: dict[str, Any] | FetchConfig | None = None,
        cache: dict[str, Any] | CacheConfig | None = None,
        search: dict[str, Any] | SearchConfig | None = None,
    ) -> None:
        """
        Args:
            tasks: inline tasks (``{"questions", "answers"}`` dicts; see ``tasks.py``).
            task_file: or a parquet file with columns task_id, questions, answers, source.
            max_turns: turns per episode (MEM1 uses 6 for QA).
            reward: ``em`` (training) or ``f1``: the summed score given as the final reward.
            tags: tag names (``TextTags`` fields: state, search, answer, information).
            open_tag: tag name of the open-page action.
            max_query_chars: longer queries are refused with an observation.
            max_action_chars: longer responses end the episode unparsed (a format error).
            browser, safety, fetch, cache, search: configs of the web stack (``config.py``).
        """
        if reward not in REWARD_METRICS:
            raise ValueError(f"reward={reward!r}; use one of {list(REWARD_METRICS)}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if isinstance(max_action_chars, bool) or not isinstance(max_action_chars, int):
            raise ValueError(f"max_action_chars must be an int, got {max_action_chars!r}")
        if max_action_chars < 1:
            raise ValueError(f"max_action_chars must be >= 1, got {max_action_chars}")
        self.tasks = load_tasks(tasks, task_file)
        self.max_turns = max_turns
        self.reward_metric = reward
        self.tags = tags if isinstance(tags, TextTags) else from_dict(TextTags, tags, "tags")
        self.open_tag = open_tag
        self.max_query_chars = max_query_chars
        self.max_action_chars = max_action_chars
        self.client = WebClient(
            browser=from_dict(BrowserConfig, browser, "browser"),
            safety=from_dict(SafetyConfig, safety, "safety"),
            fetch=from_dict(FetchConfig, fetch, "fetch"),
            cache=from_dict(CacheConfig, cache, "cache"),
            search=from_dict(SearchConfig, search, "search"),
        )
        self.fetch = self.client.fetch
        self.observation_space = text_space()
        self.action_space = text_space()
        self._task: dict[str, Any] = self.tasks[0]
        self._turn = 0
        self._done = True
        self._listing: list[tuple[str, str]] = []
        self._counts: dict[str, int] = {}

    # -- gymnasium API ---------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        index = pick_task(self.np_random, options, len(self.tasks), "the env's tasks")
        self._task = self.tasks[index]
        self._turn = 0
        self._done = False
        self._listing = []
        self._counts = {"num_searches": 0, "num_opens": 0, "web_errors": 0, "cache_hits": 0}
        info = {
            "task_id": self._task["task_id"],
            "task": {"questions": list(self._task["questions"])},
            "max_turns": self.max_turns,
        }
        return "; ".join(self._task["questions"]), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            return (
                "The episode is over; call reset() to start a new task.",
                0.0,
                True,
                False,
                self._info(format_error=True),
            )
        self._turn += 1
        text, refused = action_text(action, self.max_action_chars)
        actions = (self.tags.search, self.open_tag, self.tags.answer)
        found = None if refused else first_tagged(strip_blocks(text, self.tags.state, ""), actions)
        if refused:
            self._done = True
            return refused + " The episode ends.", 0.0, True, False, self._info(format_error=True)
        if found is None:
            self._done = True
            allowed = ", ".join(
                f"<{t}>...</{t}>" for t in (self.tags.search, self.open_tag, self.tags.answer)
            )
            return (
                f"No action found: the response must contain one of {allowed}. The episode ends.",
                0.0,
                True,
                False,
                self._info(format_error=True),
            )
        tag, body = found[0], found[1].strip()
        if tag == self.tags.answer:
            return self._answer(body)
        if not body:
            return self._observe(
                f"Error: the {tag} action was empty; put a query, a result "
                "number or a URL inside the tag.",
                format_error=True,
            )
        if tag == self.tags.search:
            if len(body) > self.max_query_chars:
                return self._observe(
                    f"Error: the query has {len(body)} characters; the limit "
                    f"is {self.max_query_chars}. Use a short keyword query.",
                    format_error=True,
                )
            return self._observe(self._search(body))
        return self._observe(*self._open(body))

    def close(self) -> None:
        self.client.close()

    # -- actions ---------------------------------------------------------------------------------
    def _answer(self, prediction: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        from memrl.envs.doc_qa.scoring import score

        self._done = True
        scores = score(prediction, self._task["answers"])
        return (
            "Answer recorded.",
            float(scores[self.reward_metric]),
            True,
            False,
            self._info(format_error=False, **scores),
        )

    def _search(self, query: str) -> str:
        self._counts["num_searches"] += 1
        outcome: SearchOutcome = self.client.search(query)
        self._counts["cache_hits"] += int(outcome.cached)
        if outcome.error:
            self._counts["web_errors"] += 1
            return f"Error: {outcome.error}"
        results = outcome.results[: self.fetch.max_results]
        if not results:
            return f'No results for "{query}". Try other keywords.'
        self._listing = [(r.title, r.url) for r in results]
        lines = [
            f'Search results for "{query}" (open one with <{self.open_tag}>N</{self.open_tag}>):'
        ]
        for i, r in enumerate(results, 1):
            lines.append(f"Result {i}(Title: {r.title}) URL: {r.url}")
            if r.snippet:
                lines.append(r.snippet)
        return "\n".join(lines)

    def _open(self, target: str) -> tuple[str, bool]:
        """The observation body of an open action, and whether the action was malformed."""
        if target.isascii() and target.isdigit():
            # int() of thousands of digits raises; no list is that long anyway.
            number = int(target) if len(target) <= 6 else 0
            if not 1 <= number <= len(self._listing):
                shown = f"1..{len(self._listing)}" if self._listing else "none (search first)"
                return (
                    f"Error: there is no item {echo(target, 20)} in the last list "
                    f"(numbers: {shown}).",
                    True,
                )
            url = self._listing[number - 1][1]
        elif re.match(r"^https?://\S+$", target, re.IGNORECASE):
            url = target
        else:
            return (
                "Error: open takes a number from the last list of results or links, or an "
                f"http(s) URL; got {echo(target, 80)!r}.",
                True,
            )
        self._counts["num_opens"] += 1
        outcome: PageOutcome = self.client.open(url)
        self._counts["cache_hits"] += int(outcome.cached)
        if outcome.error:
            self._counts["web_errors"] += 1
        page = outcome.page
        if page is None:
            return f"Error: could not open {echo(url)}: {echo(outcome.error, 400)}", False
        text, total = truncate_tokens(page.text, self.fetch.max_page_tokens)
        lines = []
        if outcome.error:
            lines.append(f"Error: {echo(url)} answered {outcome.error}; its page says:")
        lines.append(f"Page(Title: {page.title or '(no title)'}) URL: {page.url}")
        lines += [f"[Note: {note}]" for note in page.notes]
        lines.append(text or "(the page has no readable text)")
        if total > self.fetch.max_page_tokens:
            lines.append(f"[Truncated: {self.fetch.max_page_tokens} of {total} tokens shown]")
        if page.links:
            self._listing = list(page.links)
            lines.append(f"Links (open one with <{self.open_tag}>N</{self.open_tag}>):")
            lines += [f"Link {i}(Title: {t}) URL: {u}" for i, (t, u) in enumerate(page.links, 1)]
        return "\n".join(lines), False

    # -- observations ----------------------------------------------------------------------------
    def _hint(self) -> str:
        return turns_left_hint(
            self.max_turns - self._turn,
            f"You must give your final answer now in <{self.tags.answer}>...</{self.tags.answer}>.",
        )

    def _observe(
        self, body: str, format_error: bool = False
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        truncated = self._turn >= self.max_turns
        if truncated:
            self._done = True
        info_tag = self.tags.information
        obs = clean_text(f"<{info_tag}>{self._hint()}\n{body}\n</{info_tag}>")
        return obs, 0.0, False, truncated, self._info(format_error=format_error)

    def _info(self, format_error: bool, em: float = 0.0, f1: float = 0.0) -> dict[str, Any]:
        return {
            "task_id": self._task["task_id"],
            "format_error": format_error,
            "em": em,
            "f1": f1,
            "turn": self._turn,
            "browser_restarts": self.client._pool.restarts if self.client._pool else 0,
            **self._counts,
        }
