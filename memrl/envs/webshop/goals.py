"""Shopping goals (human and synthetic), price upper bounds, seeded shuffling and index splits."""

from __future__ import annotations

import itertools
import random
from typing import Any

from memrl.envs.webshop.catalogue import Catalogue

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
"""Candidate price bounds: 10, 20, ..., 990."""
NO_PRICE_BOUND = 1_000_000.0
"""price_upper of a goal without a bound (as in the original)."""
GOAL_SHUFFLE_SEED = 233
"""The original shuffles goals with random.seed(233)."""
SPLITS = {"test": (0, 500), "eval": (500, 1500), "train": (1500, None)}
"""Standard splits by goal index after shuffling."""


def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    """``(price_upper, text)``: the larger of two random picks among the first 4 bounds above price.

    With fewer than 2 bounds above the price there is no bound: ``(NO_PRICE_BOUND, "")``.
    """
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_BOUND, ""
    _, upper = sorted(rng.sample(candidates, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def human_goals(catalogue: Catalogue, seed: int = 0) -> list[dict[str, Any]]:
    """One goal per human instruction with non-empty attributes, in catalogue order."""
    rng = random.Random(seed)
    goals = []
    for product in catalogue.products:
        for ins in product.get("instructions", ()):
            attributes = ins["instruction_attributes"]
            if not attributes:
                continue
            upper, price_text = price_bound(catalogue.prices[product["asin"]], rng)
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["name"],
                    "product_category": product["product_category"],
                    "instruction_text": ins["instruction"].strip(".") + price_text,
                    "attributes": list(attributes),
                    "price_upper": upper,
                    "goal_options": ins.get("instruction_options", []),
                    "weight": 1.0,
                }
            )
    return goals


def synthetic_goals(catalogue: Catalogue, seed: int = 0) -> list[dict[str, Any]]:
    """One goal per combination of option values of every product with a synthetic instruction."""
    rng = random.Random(seed)
    goals: list[dict[str, Any]] = []
    attribute_counts: dict[str, int] = {}
    for product in catalogue.products:
        if not product.get("instruction_text"):
            continue
        attributes = product.get("instruction_attributes") or []
        if not attributes:
            continue
        upper, price_text = price_bound(catalogue.prices[product["asin"]], rng)
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            goal_options = dict(zip(names, combination, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["Title"],
                    "product_category": product["product_category"],
                    "instruction_text": f"{product['instruction_text']}{option_text}{price_text}",
                    "attributes": list(attributes),
                    "price_upper": upper,
                    "goal_options": goal_options,
                }
            )
            for a in attributes:
                attribute_counts[a] = attribute_counts.get(a, 0) + 1
    for goal in goals:
        goal["weight"] = sum(1.0 / attribute_counts[a] for a in goal["attributes"]) / len(
            goal["attributes"]
        )
    return goals


def make_goals(
    catalogue: Catalogue,
    *,
    human: bool = True,
    seed: int = 0,
    shuffle_seed: int = GOAL_SHUFFLE_SEED,
) -> list[dict[str, Any]]:
    """All goals of a catalogue, shuffled with a fixed seed (index order defines the splits)."""
    goals = human_goals(catalogue, seed) if human else synthetic_goals(catalogue, seed)
    random.Random(shuffle_seed).shuffle(goals)
    return goals


def split_indices(num_goals: int, split: str) -> range:
    """Goal indices of a split: ``test`` 0-499, ``eval`` 500-1499, ``train`` 1500+, ``all``.

    Raises:
        ValueError: unknown split name.
    """
    if split == "all":
        return range(num_goals)
    if split not in SPLITS:
        raise ValueError(f"Unknown WebShop split {split!r}. Available: {[*SPLITS, 'all']}")
    start, stop = SPLITS[split]
    stop = num_goals if stop is None else min(stop, num_goals)
    return range(min(start, num_goals), stop)
