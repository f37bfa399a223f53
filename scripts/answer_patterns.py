"""How a MEM1 doc-QA agent answers, from `memrl eval` transcripts (``*.transcripts.jsonl``).

    python scripts/answer_patterns.py RESULT.transcripts.jsonl [...] [--search-tag search]
        [--answer-tag answer]

For each file, over its episodes: the mean EM, and the share of episodes whose last answer gives
one value for every question ("a; a", a guess that scores at most one question), that repeat a
search query word for word, and that search at least two different queries (what a task of two
questions needs).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from memrl.envs.doc_qa.scoring import repeats_one_value


def tagged(text: str, tag: str) -> list[str]:
    """The stripped contents of every complete ``<tag>...</tag>`` in ``text``, in order."""
    return [m.strip() for m in re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.S)]


def patterns(episodes: list[dict[str, Any]], search_tag: str, answer_tag: str) -> dict[str, float]:
    """The shares described in the module docstring, over ``episodes`` (transcript records)."""
    if not episodes:
        raise ValueError("no episodes to read")
    same = repeated = distinct = 0
    for ep in episodes:
        generated = [turn["generated"] for turn in ep["turns"]]
        searches = [q.lower() for g in generated for q in tagged(g, search_tag)]
        answers = [a for g in generated for a in tagged(g, answer_tag)]
        if answers:
            same += repeats_one_value(answers[-1])
        repeated += len(searches) != len(set(searches))
        distinct += len(set(searches)) >= 2
    n = len(episodes)
    return {
        "episodes": n,
        "em": sum(float(ep["em"]) for ep in episodes) / n,
        "same_answer_for_all": same / n,
        "repeated_search": repeated / n,
        "two_distinct_searches": distinct / n,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("transcripts", nargs="+", help="*.transcripts.jsonl files of memrl eval")
    parser.add_argument("--search-tag", default="search")
    parser.add_argument("--answer-tag", default="answer")
    args = parser.parse_args(argv)
    for path in args.transcripts:
        lines = Path(path).read_text().splitlines()
        try:
            episodes = [json.loads(line) for line in lines if line.strip()]
            r = patterns(episodes, args.search_tag, args.answer_tag)
        except (ValueError, KeyError) as err:
            raise SystemExit(f"error: {path} is not a memrl eval transcript file ({err})") from err
        print(
            f"{path}: {r['episodes']} episodes, EM {r['em']:.3f}; one value for every question "
            f"{r['same_answer_for_all']:.2f}, a repeated search {r['repeated_search']:.2f}, "
            f"two or more different searches {r['two_distinct_searches']:.2f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
