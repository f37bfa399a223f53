"""``memrl/DocQA-v0``: answer N questions by searching a document collection (MEM1's QA task).

Text in, text out (protocol in ``memrl.envs.text``). Each turn the agent's whole response arrives as
the action; the env drops state blocks (``<think>..</think>`` by default), takes the first
``<search>query</search>`` or ``<answer>a1; a2; ...</answer>`` and either returns the top-k
passages inside ``<information>`` with the turns-left hint, or scores the answer and ends the
episode (reward = summed exact match, or summed F1 with ``reward="f1"``).

With no files configured it builds a synthetic knowledge base, its tasks and a BM25 index in
process (cached per process), so ``DocQAEnv(synthetic_passages=300)`` runs anywhere.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym

from memrl.envs.doc_qa import resources
from memrl.envs.doc_qa.scoring import question_matches, repeats_one_value, score, values_in_text
from memrl.envs.doc_qa.tasks import REDRAWS, SPLITS, Task
from memrl.envs.retrieval.base import Hit, Retriever, check_topk
from memrl.envs.text import (
    INFO_SUCCESS,
    MAX_ACTION_CHARS,
    TextTags,
    action_text,
    clean_text,
    first_tagged,
    pick_task,
    strip_blocks,
    text_space,
    turns_left_hint,
)

logger = logging.getLogger(__name__)

RETRIEVERS = ("local", "http", "ray")
"""Where passages come from: an in-process index, a Search-R1 HTTP server, the Ray service."""
REWARDS = ("em", "f1")

# Outcome keys of the last step's info (floats, besides em and f1 and the protocol's
# INFO_SUCCESS), read by evaluation.
EM_OF_QUESTION = "em_q"
"""``em_q1``, ``em_q2``, ...: exact match of each question's part of the answer."""
ANSWER_REPEATS = "answer_repeats"
"""1.0 when an answer of two or more parts gives one value for all of them ("a; a")."""
VALUES_FOUND = "values_found"
"""Questions whose answer appeared in a passage a search returned."""
VALUES_IN_STATE = "values_in_state"
"""Of those, the ones whose answer is in the last internal state the agent wrote."""


class SearchRequest(NamedTuple):
    """A search an env is about to make (``DocQAEnv.search_request``)."""

    key: Hashable
    """Equal for envs that search the same index (same server, service or in-process index)."""
    retriever: Retriever
    """A retriever that serves it."""
    query: str
    """The query, as the env would send it."""
    topk: int
    """Passages asked for."""


def turn_limit(max_turns: int | None, objectives: int) -> int:
    """The turn limit of a task with ``objectives`` questions: ``max_turns`` when set, else
    2N + 2."""
    return max_turns if max_turns is not None else 2 * objectives + 2


_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")


@dataclass(frozen=True)
class DocQAConfig:
    """Configuration of ``DocQAEnv`` (its keyword arguments)."""

    synthetic_passages: int = 1000
    """Size of the synthetic KB used when no ``tasks`` file is given."""
    synthetic_passage_words: int = 0
    """Length of synthetic passages: 0 for short ones (~24 words), N > 0 pads each to exactly N
    words with background sentences (100: like the Wikipedia passages MEM1 retrieves)."""
    synthetic_redraw: str = "none"
    """What each synthetic task draws for itself: ``none`` (every task asks about one KB),
    ``facts`` (same names and wording, new values) or ``world`` (new names and values, same
    question templates). With ``facts`` or ``world`` answers can only come from the passages
    retrieved in the episode, never from what a model remembers of other tasks; with ``world``
    a model must also copy the question's names into its searches (a test of reading and
    searching, not of memorizing the KB)."""
    seed: int = 0
    """World seed: the synthetic KB and the synthetic tasks (episodes are seeded by reset)."""
    objectives: int = 2
    """Questions per synthetic task (tasks files fix their own)."""
    split: str = "train"
    """Task split: ``train`` or ``test``."""
    num_tasks: int = 1000
    """Synthetic tasks per split."""
    multi_hop_fraction: float = 0.5
    """Share of two-hop questions in synthetic tasks."""
    test_fraction: float = 0.2
    """Share of synthetic questions reserved for the test split."""
    tasks: str | None = None
    """Tasks parquet file, or a folder with ``train.parquet``/``test.parquet``."""
    corpus: str | None = None
    """Corpus file (parquet or jsonl) for the local retriever when ``tasks`` is given (default:
    the corpus recorded in ``index``)."""
    index: str | None = None
    """Saved index folder for ``corpus`` (built in memory when absent)."""
    index_kind: str = "bm25"
    """Kind of index built in memory for ``corpus``: ``bm25`` or ``dense``."""
    retriever: str = "local"
    """``local`` (in-process index), ``http`` (``retrieval_url``) or ``ray`` (named service)."""
    retrieval_url: str | None = None
    """Base URL of a Search-R1-protocol server, e.g. ``http://127.0.0.1:8000``."""
    ray_service: str = "memrl_retrieval"
    """Name of the Ray retrieval actor (``retriever="ray"``)."""
    topk: int = 3
    """Passages per search."""
    max_turns: int | None = None
    """Turn limit; the episode is truncated when it is reached without an answer. None: derived
    from each task's number of questions N as 2N + 2 (a search per hop of a two-hop question,
    plus the answer; 6 for the 2-question tasks MEM1 trains on)."""
    tags: dict[str, str] | None = None
    """Overrides of the tag names (keys of ``TextTags``: state, search, answer, information)."""
    reward: str = "em"
    """Reward at the answer: summed exact match (``em``) or summed token F1 (``f1``)."""
    end_on_format_error: bool = True
    """End the episode (reward 0) when a response has no action tag, as MEM1 does."""
    max_query_chars: int = 512
    """Longer search queries are refused with an observation saying so."""
    max_action_chars: int = MAX_ACTION_CHARS
    """Longer responses are refused unparsed, as a format error (``end_on_format_error``)."""
    max_info_chars: int = 4000
    """Cap on the passages' text in one observation (about 1000 tokens)."""


class DocQAEnv(gym.Env):
    """Multi-objective document-retrieval QA; keyword arguments are ``DocQAConfig`` fields."""

    metadata = {"render_modes": []}

    def __init__(self, **kwargs: Any) -> None:
        allowed = [f.name for f in dataclasses.fields(DocQAConfig)]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise ValueError(f"Unknown DocQAEnv option(s) {unknown}. Allowed: {allowed}.")
        self.config = cfg = DocQAConfig(**kwargs)
        _validate(cfg)
        self.tags = TextTags(**(cfg.tags or {}))
        self.observation_space = text_space()
        self.action_space = text_space()
        self.tasks: list[Task] = self._load_tasks()
        # With synthetic_redraw each task brings its own index, chosen at reset.
        self.retriever: Retriever | None = (
            self._make_retriever() if cfg.synthetic_redraw == "none" else None
        )
        self.task: Task | None = None
        self._max_turns = 0
        self._prefetched: dict[str, list[Hit]] = {}
        self._turn = 0
        self._done = True
        self._num_searches = 0
        self._num_format_errors = 0
        self._found = [False]
        self._state_text = ""
        self._answer_info: dict[str, float] = {}

    # -- construction ------------------------------------------------------------------------

    def _load_tasks(self) -> list[Task]:
        cfg = self.config
        if cfg.tasks is not None:
            tasks = resources.tasks_from_file(cfg.tasks, cfg.split)
        else:
            tasks = resources.cached_synthetic_tasks(
                cfg.synthetic_passages, cfg.seed, cfg.objectives, cfg.num_tasks, cfg.split,
                cfg.test_fraction, cfg.multi_hop_fraction, cfg.synthetic_redraw,
            )  # fmt: skip
        if not tasks:
            raise ValueError(f"No tasks in split {cfg.split!r} of {cfg.tasks}; build some first.")
        return list(tasks)

    def _make_retriever(self) -> Retriever:
        cfg = self.config
        if cfg.retriever == "http":
            from memrl.envs.retrieval.http import HTTPRetriever

            return HTTPRetriever(cfg.retrieval_url)
        if cfg.retriever == "ray":
            from memrl.envs.retrieval.service import RayRetriever

            return RayRetriever(cfg.ray_service)
        if cfg.tasks is None:
            return resources.synthetic_retriever(
                cfg.synthetic_passages, cfg.seed, passage_words=cfg.synthetic_passage_words
            )
        return resources.local_retriever(cfg.corpus, cfg.index, cfg.index_kind)

    # -- gymnasium API -----------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Starts an episode on a random task, or on ``options["task_index"]``."""
        super().reset(seed=seed)
        index = pick_task(self.np_random, options, len(self.tasks), f"split {self.config.split!r}")
        self.task = self.tasks[index]
        if self.config.synthetic_redraw != "none":
            cfg = self.config
            self.retriever = resources.synthetic_retriever(
                cfg.synthetic_passages, cfg.seed, passage_words=cfg.synthetic_passage_words,
                task=(cfg.synthetic_redraw, cfg.split, index),
            )  # fmt: skip
        self._turn = 0
        self._max_turns = turn_limit(self.config.max_turns, len(self.task.questions))
        self._done = False
        self._num_searches = 0
        self._num_format_errors = 0
        self._found = [False] * len(self.task.questions)
        self._state_text = ""
        self._answer_info = {}
        observation = "; ".join(self.task.questions)
        info = {
            "task_id": self.task.task_id,
            "task": {"questions": list(self.task.questions), "task_index": index},
            "max_turns": self._max_turns,
            "objectives": len(self.task.questions),
        }
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Applies one response: a search (passages back), an answer (scored, episode ends)."""
        if self._done or self.task is None:
            raise RuntimeError("DocQAEnv.step() called on a finished episode; call reset() first.")
        self._turn += 1
        turns_left = self._max_turns - self._turn
        text, refused = action_text(action, self.config.max_action_chars)
        if refused is not None:
            self._num_format_errors += 1
            if self.config.end_on_format_error:
                return self._end(refused + " The episode ends with reward 0.", format_error=True)
            return self._continue(refused, turns_left, format_error=True)
        kind, content = self._parse(text)
        state = first_tagged(text, (self.tags.state,))
        self._state_text = state[1] if state is not None else ""

        if kind == self.tags.answer:
            return self._answer(content)
        if kind is None:
            self._num_format_errors += 1
            message = (
                f"Invalid response: it contains no <{self.tags.search}>query</{self.tags.search}>"
                f" and no <{self.tags.answer}>answer 1; answer 2</{self.tags.answer}>."
            )
            if self.config.end_on_format_error:
                return self._end(message + " The episode ends with reward 0.", format_error=True)
            return self._continue(message, turns_left, format_error=True)

        query = " ".join(content.split())
        if not query:
            self._num_format_errors += 1
            message = (
                f"Invalid search: the query inside <{self.tags.search}></{self.tags.search}> is "
                "empty. Search with a few keywords."
            )
            return self._continue(message, turns_left, format_error=True)
        if len(query) > self.config.max_query_chars:
            self._num_format_errors += 1
            message = (
                f"Invalid search: the query has {len(query)} characters; at most "
                f"{self.config.max_query_chars} are allowed. Search with a few keywords."
            )
            return self._continue(message, turns_left, format_error=True)

        self._num_searches += 1
        hits = self._prefetched.pop(query, None)
        if hits is None:
            hits = self.retriever.retrieve([query], self.config.topk)[0]
        self._prefetched = {}
        self._note_found(hits)
        return self._continue(self._format_hits(hits), turns_left, format_error=False)

    # -- batched retrieval -------------------------------------------------------------------

    def search_request(self, action: str) -> SearchRequest | None:
        """The search ``step(action)`` would make (None: the action does not search), so that a
        caller stepping many envs can fetch all their queries in one retriever call."""
        if self._done or self.task is None:
            return None
        text, refused = action_text(action, self.config.max_action_chars)
        if refused is not None:  # step refuses it unparsed: nothing to fetch
            return None
        kind, content = self._parse(text)
        query = " ".join(content.split())
        if kind != self.tags.search or not query or len(query) > self.config.max_query_chars:
            return None
        return SearchRequest(self._retriever_key(), self.retriever, query, self.config.topk)

    def prefetch(self, query: str, hits: list[Hit]) -> None:
        """The hits of ``query``, fetched by the caller; the next ``step`` that searches it uses
        them instead of calling the retriever."""
        self._prefetched[query] = hits

    def _retriever_key(self) -> tuple[str, Any]:
        cfg = self.config
        if cfg.retriever == "http":
            return ("http", cfg.retrieval_url)
        if cfg.retriever == "ray":
            return ("ray", cfg.ray_service)
        return ("local", id(self.retriever))

    # -- pieces ------------------------------------------------------------------------------

    def _parse(self, action: str) -> tuple[str | None, str]:
        # Tags written inside the state block are thoughts, not actions.
        found = first_tagged(
            strip_blocks(action, self.tags.state), (self.tags.search, self.tags.answer)
        )
        return found if found is not None else (None, "")

    def _answer(self, content: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        targets = self.task.targets()
        result = score(content, targets)
        self._done = True
        reward = result[self.config.reward]
        matches = question_matches(content, targets)
        self._answer_info = {f"{EM_OF_QUESTION}{k + 1}": m for k, m in enumerate(matches)}
        self._answer_info[INFO_SUCCESS] = float(all(matches))
        self._answer_info[ANSWER_REPEATS] = float(repeats_one_value(content))
        info = self._info(format_error=False, answered=True, **result)
        info["answer_parts"] = len(content.split(";"))
        return "", float(reward), True, False, info

    def _note_found(self, hits: list[Hit]) -> None:
        """Marks the questions whose answer (any alias) a search has shown the agent."""
        text = " ".join(hit.text for hit in hits)
        for k, aliases in enumerate(self.task.targets()):
            self._found[k] = self._found[k] or any(values_in_text(aliases, text))

    def _continue(
        self, body: str, turns_left: int, format_error: bool
    ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation = self._information(self._hint(turns_left) + "\n" + body)
        truncated = turns_left <= 0
        self._done = truncated
        return observation, 0.0, False, truncated, self._info(format_error, answered=False)

    def _end(self, message: str, format_error: bool) -> tuple[str, float, bool, bool, dict]:
        self._done = True
        info = self._info(format_error, answered=False)
        return self._information(message), 0.0, True, False, info

    def _information(self, body: str) -> str:
        tag = self.tags.information
        # Passages from a foreign HTTP server may carry lone surrogates (JSON "\ud800" escapes).
        return clean_text(f"<{tag}>{body}</{tag}>")

    @staticmethod
    def _hint(turns_left: int) -> str:
        return turns_left_hint(turns_left, "You must answer the question in the next turn.")

    def _format_hits(self, hits: list[Hit]) -> str:
        if not hits:
            return "No documents matched the query. Try other keywords.\n"
        budget = max(1, self.config.max_info_chars // len(hits))
        lines = []
        for i, hit in enumerate(hits, start=1):
            text = hit.text if len(hit.text) <= budget else hit.text[:budget].rstrip() + " ..."
            lines.append(f"Doc {i}(Title: {hit.title}) {text}\n")
        return "".join(lines)

    def _info(self, format_error: bool, answered: bool, em: float = 0.0, f1: float = 0.0) -> dict:
        targets = self.task.targets()
        in_state = [
            found and any(values_in_text(aliases, self._state_text))
            for found, aliases in zip(self._found, targets, strict=True)
        ]
        unanswered = {f"{EM_OF_QUESTION}{k + 1}": 0.0 for k in range(len(targets))}
        return {
            "task_id": self.task.task_id,
            "em": em,
            "f1": f1,
            "num_searches": self._num_searches,
            "format_error": format_error,
            "num_format_errors": self._num_format_errors,
            "answered": answered,
            "turn": self._turn,
            INFO_SUCCESS: 0.0,
            ANSWER_REPEATS: 0.0,
            **unanswered,
            **self._answer_info,
            VALUES_FOUND: float(sum(self._found)),
            VALUES_IN_STATE: float(sum(in_state)),
        }


def _validate(cfg: DocQAConfig) -> None:
    if cfg.split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {cfg.split!r}")
    if cfg.retriever not in RETRIEVERS:
        raise ValueError(f"retriever must be one of {list(RETRIEVERS)}, got {cfg.retriever!r}")
    if cfg.reward not in REWARDS:
        raise ValueError(f"reward must be one of {list(REWARDS)}, got {cfg.reward!r}")
    check_topk(cfg.topk)
    words = cfg.synthetic_passage_words
    if isinstance(words, bool) or not isinstance(words, int) or words < 0:
        raise ValueError(
            f"synthetic_passage_words must be an int >= 0 (0: short passages; 100: "
            f"Wikipedia-like), got {words!r}"
        )
    for name in (
        "max_turns", "objectives", "num_tasks", "max_query_chars", "max_info_chars",
        "max_action_chars",
    ):  # fmt: skip
        value = getattr(cfg, name)
        if name == "max_turns" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if cfg.synthetic_redraw not in REDRAWS:
        raise ValueError(
            f"synthetic_redraw must be one of {list(REDRAWS)}, got {cfg.synthetic_redraw!r}"
        )
    if cfg.synthetic_redraw != "none" and (cfg.tasks is not None or cfg.retriever != "local"):
        raise ValueError(
            f"synthetic_redraw={cfg.synthetic_redraw!r} draws a KB per task and searches it in "
            "process: it needs the synthetic tasks (no tasks=) and retriever='local', got "
            f"tasks={cfg.tasks!r}, retriever={cfg.retriever!r}."
        )
    if cfg.retriever == "http" and not cfg.retrieval_url:
        raise ValueError("retriever='http' needs retrieval_url, e.g. 'http://127.0.0.1:8000'.")
    if cfg.retriever == "local" and cfg.tasks is not None and not (cfg.corpus or cfg.index):
        raise ValueError(
            "A tasks file with the local retriever needs corpus= (the passages to search) or "
            "index= (a folder from `memrl data index`); or use retriever='http'/'ray' with a "
            "running retrieval service."
        )
    if cfg.tags is not None:
        allowed = [f.name for f in dataclasses.fields(TextTags)]
        unknown = sorted(set(cfg.tags) - set(allowed))
        if unknown:
            raise ValueError(f"Unknown tag key(s) {unknown}. Allowed: {allowed}.")
        for key, value in cfg.tags.items():
            if not isinstance(value, str) or not _TAG_NAME.fullmatch(value):
                raise ValueError(
                    f"Tag {key}={value!r} is not a valid tag name; use letters, digits, _ or -."
                )
    tags = TextTags(**(cfg.tags or {}))
    names = [tags.state, tags.search, tags.answer, tags.information]
    if len(set(names)) != len(names):
        raise ValueError(f"Tag names must differ from each other, got {names}.")
