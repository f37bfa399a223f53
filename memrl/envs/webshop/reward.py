"""WebShop's reward for a purchase, following the WebShop benchmark's definition to the letter.

``R = r_type * (n_attr + n_opt + [price <= price_upper]) / (n_attributes + n_goal_options + 1)``

Quirks kept on purpose, because published numbers depend on them:

- options loop over the PURCHASED options, so ``n_opt`` can exceed ``len(goal_options)`` (and R
  can exceed 1) when a product has more option groups than the goal names;
- an option named "size" matches only by exact equality (after colour normalization);
- unmatched attributes/options still count if they are substrings of the lower-cased title, the
  bullet points joined by spaces, or the description (a string ``BulletPoints`` is joined
  character by character, exactly like the original's ``' '.join``);
- ``title_score`` divides by the goal's noun LIST (repeats count) and ``title_score == 0`` forces
  ``r_type = 0`` even when the query matches.

One deliberate difference: when ``price_upper <= 0`` the original adds ``None`` and crashes; here
the price term is then 0 (the denominator keeps its ``+ 1``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memrl.envs.webshop.textproc import normalize_color, title_nouns, token_set_ratio

EXACT_MATCH_OPTIONS = ("size",)
"""Option names matched only by exact equality."""
FUZZY_THRESHOLD = 85
"""A fuzzy match needs token_set_ratio strictly above this."""


def _text_fields(product: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        product["Title"].lower(),
        " ".join(product["BulletPoints"]).lower(),
        product["Description"].lower(),
    )


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any]) -> dict[str, Any]:
    """r_type with its parts: query_match, category_match, title_score."""
    query_match = product["query"] == goal["query"]
    bought_levels = {x.strip() for x in product["product_category"].split("›")}
    goal_levels = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought_levels & goal_levels) >= 2

    bought_nouns = title_nouns(product["name"])
    goal_nouns = title_nouns(goal["name"])
    if goal_nouns:
        title_score = len(set(bought_nouns) & set(goal_nouns)) / len(goal_nouns)
    else:
        title_score = 0.2

    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {
        "r_type": r_type,
        "query_match": query_match,
        "category_match": category_match,
        "title_score": title_score,
    }


def attribute_matches(product: Mapping[str, Any], goal_attributes: Sequence[str]) -> int:
    """How many goal attributes the product has (fuzzy on Attributes, else substring of text)."""
    title, bullets, description = _text_fields(product)
    matches = 0
    for g_attr in goal_attributes:
        if any(
            token_set_ratio(p_attr, g_attr) > FUZZY_THRESHOLD for p_attr in product["Attributes"]
        ):
            matches += 1
        elif g_attr in title or g_attr in bullets or g_attr in description:
            matches += 1
    return matches


def option_matches(
    product: Mapping[str, Any], goal_options: Sequence[str], options: Mapping[str, str]
) -> int:
    """How many PURCHASED options match a goal option (see the module docstring)."""
    goal_values = [normalize_color(o) for o in goal_options]
    title, bullets, description = _text_fields(product)
    matches = 0
    for name, raw_value in options.items():
        value = normalize_color(raw_value)
        if name.lower() in EXACT_MATCH_OPTIONS:
            matched = value in goal_values
        else:
            matched = any(token_set_ratio(g, value) > FUZZY_THRESHOLD for g in goal_values)
        if matched or value in title or value in bullets or value in description:
            matches += 1
    return matches


def goal_option_values(goal: Mapping[str, Any]) -> list[str]:
    """Goal options as a list of values (synthetic goals store a name -> value dict)."""
    opts = goal["goal_options"]
    return list(opts.values()) if isinstance(opts, Mapping) else list(opts)


def get_reward_verbose(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
) -> tuple[float, dict[str, Any]]:
    """The reward and its breakdown.

    Args:
        product: the purchased product (asin, name, query, category, product_category, Title,
            BulletPoints, Description, Attributes).
        goal: asin, name, query, category, product_category, instruction_text, attributes,
            goal_options (list of values, or name -> value), price_upper.
        price: the price paid.
        options: the options chosen on the item page, option name -> value.

    Returns:
        ``(reward, info)`` where info has r_type, r_att, r_option (None without goal options),
        r_price (None when price_upper <= 0), query_match, category_match, title_score, the
        weights w_att/w_option/w_price and the raw counts n_attr/n_opt.
    """
    type_info = type_reward(product, goal)
    goal_attrs = list(goal["attributes"])
    goal_opts = goal_option_values(goal)
    r_price = (price <= goal["price_upper"]) if goal["price_upper"] > 0 else None
    n_attr = attribute_matches(product, goal_attrs)
    n_opt = option_matches(product, goal_opts, options)
    denominator = len(goal_attrs) + len(goal_opts) + 1
    reward = (n_attr + n_opt + int(bool(r_price))) / denominator * type_info["r_type"]
    info: dict[str, Any] = {
        **type_info,
        "r_att": n_attr / len(goal_attrs) if goal_attrs else None,
        "r_option": n_opt / len(goal_opts) if goal_opts else None,
        "r_price": r_price,
        "w_att": len(goal_attrs) / denominator,
        "w_option": len(goal_opts) / denominator,
        "w_price": 1 / denominator,
        "n_attr": n_attr,
        "n_opt": n_opt,
    }
    return reward, info


def get_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
) -> float:
    """The reward of buying ``product`` at ``price`` with ``options`` for ``goal`` (see module)."""
    return get_reward_verbose(product, goal, price, options)[0]
