"""Every rule of the WebShop reward (the benchmark's definition), with hand-computed values."""

from __future__ import annotations

import copy
from math import isclose

import pytest

from memrl.envs.webshop.reward import get_reward, get_reward_verbose, type_reward
from memrl.envs.webshop.textproc import (
    normalize_color,
    search_tokens,
    stem,
    title_nouns,
    token_set_ratio,
)

NAME = "Lumo Hair Shampoo"


def _product(**kw):
    p = {
        "asin": "B000000001",
        "name": NAME,
        "query": "shampoo",
        "category": "beauty",
        "product_category": "a › b › c",
        "Title": NAME,
        "BulletPoints": [],
        "Description": "",
        "Attributes": ["tea tree", "essential oil", "natural ingredients"],
    }
    p.update(kw)
    return p


def _goal(**kw):
    g = {
        "asin": "B000000001",
        "name": NAME,
        "query": "shampoo",
        "category": "beauty",
        "product_category": "a › b › c",
        "instruction_text": "i need shampoo",
        "attributes": ["tea tree", "essential oils", "natural ingredients"],
        "goal_options": {"color": "grey", "size": "xl"},
        "price_upper": 40.0,
    }
    g.update(kw)
    return g


EXACT_OPTIONS = {"color": "grey", "size": "xl"}


def test_exact_match_gives_one():
    # (3 attributes + 2 options + price) / (3 + 2 + 1) * r_type 1
    reward, info = get_reward_verbose(_product(), _goal(), 35.0, EXACT_OPTIONS)
    assert reward == 1.0
    assert info["r_type"] == 1.0 and info["query_match"] and info["category_match"]
    assert info["title_score"] == 1.0
    assert info["r_att"] == 1.0 and info["r_option"] == 1.0 and info["r_price"] is True


def test_fuzzy_similarity_on_attributes():
    # "essential oil" vs "essential oils": token_set_ratio 96 > 85; "tea bag" vs "tea tree": 60.
    assert token_set_ratio("essential oil", "essential oils") == 96
    assert token_set_ratio("tea bag", "tea tree") == 60
    product = _product(Attributes=["tea bag", "essential oil", "natural ingredients"])
    # 2 attributes + 2 options + price = 5 of 6
    assert isclose(get_reward(product, _goal(), 35.0, EXACT_OPTIONS), 5 / 6)


def test_attribute_substring_fallback_in_bullets_and_description():
    product = _product(
        Attributes=[],
        BulletPoints=["This shampoo has essential oils and smells like lemons"],
        Description="Best shampoo on the market, made with natural ingredients",
    )
    reward, info = get_reward_verbose(product, _goal(), 35.0, EXACT_OPTIONS)
    assert info["n_attr"] == 2  # tea tree is nowhere
    assert isclose(reward, (2 + 2 + 1) / 6)


def test_attribute_substring_in_title_is_lowercased():
    product = _product(Attributes=[], Title="Shampoo With TEA TREE Extract")
    assert get_reward_verbose(product, _goal(), 35.0, EXACT_OPTIONS)[1]["n_attr"] == 1


def test_string_bullets_are_joined_character_by_character_like_the_original():
    # ' '.join("essential oils ...") spaces out the letters, so the bullet no longer matches.
    product = _product(
        Attributes=[], BulletPoints="essential oils", Description="made with natural ingredients"
    )
    reward, info = get_reward_verbose(product, _goal(), 35.0, EXACT_OPTIONS)
    assert info["n_attr"] == 1
    assert isclose(reward, (1 + 2 + 1) / 6)


def test_two_of_three_attributes():
    product = _product(Attributes=["essential oil", "natural ingredients"])
    reward, info = get_reward_verbose(product, _goal(goal_options=[]), 35.0, {})
    assert info["r_att"] == 2 / 3
    assert isclose(reward, (2 + 0 + 1) / (3 + 0 + 1))


def test_size_matches_only_exactly():
    # Fuzzy similarity of "large" and "x-large" is 100, but size needs equality.
    assert token_set_ratio("x-large", "large") == 100
    goal = _goal(goal_options=["x-large"])
    for key in ("size", "Size"):
        _, info = get_reward_verbose(_product(), goal, 35.0, {key: "large"})
        assert info["n_opt"] == 0, key
    _, info = get_reward_verbose(_product(), goal, 35.0, {"size": "x-large"})
    assert info["n_opt"] == 1
    # Any other option name matches fuzzily.
    _, info = get_reward_verbose(_product(), goal, 35.0, {"fit": "large"})
    assert info["n_opt"] == 1


def test_fuzzy_option_cool_powder_snow():
    goal = _goal(goal_options=["cool powder snow", "xl", "pack of 12"])
    options = {"amount": "pack of 12", "color": "powder snow", "size": "xl"}
    reward, info = get_reward_verbose(_product(), goal, 35.0, options)
    assert info["n_opt"] == 3 and info["r_option"] == 1.0
    assert reward == 1.0


def test_colour_normalization_applies_to_both_sides_even_for_size():
    assert normalize_color("dark navy blue stripe") == "navy blue"
    assert normalize_color("light grey melange") == "light grey"
    assert normalize_color("redwood") == "red"  # plain substring test, as the original
    assert normalize_color("xl") == "xl"
    goal = _goal(goal_options=["light grey melange"])
    _, info = get_reward_verbose(_product(), goal, 35.0, {"size": "light grey"})
    assert info["n_opt"] == 1


def test_option_substring_fallback_and_loop_over_purchased_options():
    # Goal names one option; two purchased options count (one by fuzzy match, one because it
    # appears in the title), so R exceeds 1: (1 attr + 2 options + price) / (1 + 1 + 1) = 4/3.
    product = _product(Title="Hair Dryer with Diffuser", Attributes=["ionic"])
    goal = _goal(attributes=["ionic"], goal_options=["red"])
    reward, info = get_reward_verbose(
        product, goal, 35.0, {"color": "red", "style": "with diffuser"}
    )
    assert info["n_opt"] == 2
    assert isclose(reward, 4 / 3)


def test_unmatched_purchased_option_counts_nothing():
    goal = _goal(goal_options=["grey", "xl", "pack of 12"])
    options = {"amount": "pack of 12", "color": "blue", "size": "xl"}
    reward, info = get_reward_verbose(_product(), goal, 35.0, options)
    assert info["n_opt"] == 2 and info["r_option"] == 2 / 3
    assert isclose(reward, (3 + 2 + 1) / (3 + 3 + 1))


def test_empty_goal_options_count_no_options():
    reward, info = get_reward_verbose(_product(), _goal(goal_options=[]), 35.0, {})
    assert info["r_option"] is None and info["n_opt"] == 0
    assert reward == 1.0  # (3 + 0 + 1) / (3 + 0 + 1)
    # Purchased options with no goal options still loop (and can only match by substring).
    _, info = get_reward_verbose(_product(), _goal(goal_options=[]), 35.0, {"color": "blue"})
    assert info["n_opt"] == 0


def test_goal_options_as_dict_or_list_are_equivalent():
    a = get_reward(
        _product(), _goal(goal_options={"color": "grey", "size": "xl"}), 35.0, EXACT_OPTIONS
    )
    b = get_reward(_product(), _goal(goal_options=["grey", "xl"]), 35.0, EXACT_OPTIONS)
    assert a == b == 1.0


def test_price_term():
    # Over the bound: 5 of 6.
    reward, info = get_reward_verbose(_product(), _goal(), 45.0, EXACT_OPTIONS)
    assert info["r_price"] is False and isclose(reward, 5 / 6)
    # Exactly at the bound counts.
    assert get_reward(_product(), _goal(), 40.0, EXACT_OPTIONS) == 1.0
    # price_upper <= 0: no price term (the original would crash), denominator keeps its + 1.
    reward, info = get_reward_verbose(_product(), _goal(price_upper=0), 1.0, EXACT_OPTIONS)
    assert info["r_price"] is None and isclose(reward, 5 / 6)


def test_category_match_needs_two_shared_levels_in_any_order():
    goal = _goal(product_category="a › b › c")
    for cat, expected in (
        ("b › c › a", True),
        ("a › d › b", True),
        ("a › a › b", True),
        ("a › a › d", False),
        ("d › e › f", False),
        (" c ›x› a ", True),
    ):
        assert type_reward(_product(product_category=cat), goal)["category_match"] is expected, cat


def test_title_score_uses_noun_list_with_repeats():
    goal = _goal(name="Bar Bar Soap")
    info = type_reward(_product(name="Bar Holder"), goal)
    assert isclose(info["title_score"], 1 / 3)  # {bar} / [bar, bar, soap]


def test_r_type_half_when_nothing_matches_and_title_score_at_most_point_two():
    goal = _goal(name="Red Cotton Shirt Tee Top", query="q1", product_category="a › b › c")
    product = _product(name="Shirt Widget", query="q2", product_category="x › y › z")
    info = type_reward(product, goal)
    assert info["title_score"] == 0.2 and info["r_type"] == 0.5
    # Exact attributes/options/price: 6/6 * 0.5
    assert get_reward(product, goal, 35.0, EXACT_OPTIONS) == 0.5
    # title_score > 0.2 alone is a match.
    info = type_reward(_product(name="Shirt Tee Gadget", query="q2", product_category="x"), goal)
    assert info["title_score"] == 0.4 and info["r_type"] == 1.0


def test_low_title_score_overrides_query_match():
    goal = _goal(name="Alpha Bravo Charlie Delta Echo Foxtrot Golf Hotel India Juliet Kilo")
    info = type_reward(_product(name="Kilo Widget"), goal)  # query and category match
    assert isclose(info["title_score"], 1 / 11) and info["r_type"] == 0.1
    assert isclose(get_reward(_product(name="Kilo Widget"), goal, 35.0, EXACT_OPTIONS), 0.1)
    info = type_reward(_product(name="Zulu Widget"), goal)
    assert info["title_score"] == 0.0 and info["r_type"] == 0.0
    assert get_reward(_product(name="Zulu Widget"), goal, 35.0, EXACT_OPTIONS) == 0.0


def test_goal_name_without_nouns_scores_point_two():
    goal = _goal(name="100% 16oz", query="q1")
    assert title_nouns("100% 16oz") == []
    info = type_reward(_product(query="q1"), goal)
    assert info["title_score"] == 0.2 and info["r_type"] == 1.0  # the query matches
    info = type_reward(_product(query="q2", product_category="x › y"), goal)
    assert info["r_type"] == 0.5


def test_original_pinned_numbers():
    # The original's test_get_reward sequence: 1, 2/3, 4/7, then r_type 0.5 -> 2/7.
    goal = {
        "query": "Query 1",
        "product_category": "a › b › c",
        "name": "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White",
        "attributes": ["tea tree", "essential oils", "natural ingredients"],
        "goal_options": {"color": "grey", "size": "XL"},
        "price_upper": 40.00,
    }
    purchased = {
        "query": "Query 1",
        "product_category": "a › b › c",
        "name": goal["name"],
        "Attributes": ["tea tree", "essential oil", "natural ingredients"],
        "Title": "",
        "BulletPoints": [],
        "Description": "",
    }
    opts = {"color": "grey", "size": "XL"}
    assert get_reward(purchased, goal, 35, opts) == 1
    purchased.update(
        Attributes=[],
        BulletPoints="This shampoo has essential oils",
        Description="Best shampoo on the market, made with natural ingredients",
    )
    assert isclose(get_reward(purchased, goal, 35, opts), 2 / 3)
    goal = copy.deepcopy(goal)
    goal["goal_options"] = {"color": "grey", "size": "XL", "amount": "pack of 12"}
    assert isclose(get_reward(purchased, goal, 35, opts), 4 / 7)
    goal["name"] = (
        "Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar"
    )
    purchased.update(
        name="BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic "
        "SC-HT830V DVD/VCR Combo Home Theater System",
        query="Query 2",
        product_category="a › d › e",
    )
    assert isclose(get_reward(purchased, goal, 35, opts), 2 / 7)


@pytest.mark.parametrize(
    ("name", "nouns"),
    [
        (
            "adidas Unisex-Adult D.o.n. Issue 2 Basketball Shoe",
            ["adidas", "unisex", "adult", "d.o.n", "issue", "basketball", "shoe"],
        ),
        ("The Best Natural Shampoo, Quickly Drying and Washable", ["shampoo"]),
        ("2pcs 16oz Ring Holder", ["ring", "holder"]),
    ],
)
def test_noun_heuristic(name, nouns):
    assert title_nouns(name) == nouns


def test_original_title_score_similar_names():
    goal = _goal(name="adidas Unisex-Adult D.o.n. Issue 2 Basketball Shoe")
    info = type_reward(_product(name="adidas Unisex-Adult D.o.n. Issue 2 Indoor Court Shoe"), goal)
    assert isclose(info["title_score"], 6 / 7)  # the original pins ~0.85


def test_token_set_ratio_preprocesses_like_thefuzz():
    assert token_set_ratio("X-Large", "x large") == 100
    assert token_set_ratio("café", "caf") == 100  # U+0080-U+00FF dropped (force_ascii)
    assert isinstance(token_set_ratio("a b", "a c"), int)
    assert token_set_ratio("", "anything") == 0


@pytest.mark.parametrize(
    "a, b, expected",
    [
        # Scores of thefuzz 0.22.1's fuzz.token_set_ratio: force_ascii removes only U+0080-U+00FF;
        # other non-alphanumerics become spaces, other letters stay letters.
        ("women\u2019s", "womens", 77),
        ("z\u0142oty", "zloty", 80),
        ("café crème", "cafe creme", 89),
        ("Größe XL", "grosse xl", 80),
        ("naïve ½ cup", "naive cup", 94),
        ("日本 tea", "tea", 100),
        ("black \u2013 navy", "black navy", 100),
        ("ÀÉÎ õü", "aei ou", 0),
    ],
)
def test_token_set_ratio_matches_thefuzz_beyond_latin1(a, b, expected):
    assert token_set_ratio(a, b) == expected


def test_search_analyzer():
    assert [stem(w) for w in ("batteries", "shoes", "glass", "oils", "bus", "toys")] == [
        "battery",
        "shoes",
        "glass",
        "oil",
        "bus",
        "toy",
    ]
    assert search_tokens("The Batteries, and USB-C cables!") == ["battery", "usb", "c", "cable"]
