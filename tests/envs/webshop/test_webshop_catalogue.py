"""Catalogue files: the generator, the loader of the original schema, goals, splits, search."""

from __future__ import annotations

import json
import random

import pytest

from memrl.envs.webshop.catalogue import (
    catalogue_from_records,
    find_data_files,
    load_catalogue,
    product_document,
)
from memrl.envs.webshop.generator import generate_catalogue, iter_catalogue
from memrl.envs.webshop.goals import (
    NO_PRICE_BOUND,
    make_goals,
    price_bound,
    split_indices,
    synthetic_goals,
)
from memrl.envs.webshop.search import SearchIndex
from memrl.envs.webshop.vocab import PRODUCT_TYPES, SIZES_BY_QUERY


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("ws") / "cat"
    generate_catalogue(out, 300, seed=5)
    return out


def _raw(asin="B000000001", **kw):
    r = {
        "asin": asin,
        "name": "Lumo Shampoo",
        "full_description": "d",
        "small_description": ["b1", "b2"],
        "pricing": "$12.50",
        "customization_options": {"Color": [{"value": "Navy/Blue", "image": None}]},
        "images": [],
        "category": "beauty",
        "query": " Shampoo ",
        "product_category": "a › b › c",
    }
    r.update(kw)
    return r


def test_generator_is_deterministic_and_seeded(written, tmp_path):
    again = tmp_path / "again"
    other = tmp_path / "other"
    generate_catalogue(again, 300, seed=5)
    generate_catalogue(other, 300, seed=6)
    for name in ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json"):
        assert (written / name).read_bytes() == (again / name).read_bytes()
        assert (written / name).read_bytes() != (other / name).read_bytes()


def test_generated_files_follow_the_original_schema(written):
    products = json.loads((written / "items_shuffle.json").read_text())
    ins_v2 = json.loads((written / "items_ins_v2.json").read_text())
    human = json.loads((written / "items_human_ins.json").read_text())
    assert len(products) == 300 and len({p["asin"] for p in products}) == 300
    assert sum(len(v) for v in human.values()) == 600  # default: min(12087, 2 * N)
    ranges = 0
    for p in products:
        assert set(p) == {
            "asin",
            "name",
            "full_description",
            "small_description",
            "pricing",
            "customization_options",
            "images",
            "category",
            "query",
            "product_category",
        }
        assert len(p["asin"]) == 10 and p["asin"].startswith("B0")
        assert p["product_category"].count(" › ") >= 2
        ranges += " - $" in p["pricing"]
        entry = ins_v2[p["asin"]]
        assert set(entry["instruction_attributes"]) <= set(entry["attributes"])
        values = {o["value"] for opts in p["customization_options"].values() for o in opts}
        for ins in human.get(p["asin"], []):
            assert set(ins["instruction_attributes"]) <= set(entry["attributes"])
            assert set(ins["instruction_options"]) <= values
            for attr in ins["instruction_attributes"]:
                assert attr in ins["instruction"]
    assert 0 < ranges < 300


def test_every_sized_type_has_sizes():
    for ptype in PRODUCT_TYPES:
        if "size" in ptype.options:
            assert ptype.query in SIZES_BY_QUERY
    assert len({t.category for t in PRODUCT_TYPES}) == 5


@pytest.mark.parametrize("n", [99, 1_000_001])
def test_generator_size_limits(n):
    with pytest.raises(ValueError, match=r"num_products must be in \[100, 1000000\]"):
        next(iter_catalogue(n))


def test_loader_processes_records_like_the_original(written):
    cat = load_catalogue(written, price_seed=1)
    assert len(cat) == 300
    p = cat.products[0]
    assert p["Title"] == p["name"] and isinstance(p["BulletPoints"], list)
    assert p["Attributes"] != ["DUMMY_ATTR"]
    assert sum(len(q.get("instructions", [])) for q in cat.products) == 600
    for prod in cat.products:
        lo, hi = prod["pricing"][0], prod["pricing"][-1]
        assert lo <= cat.prices[prod["asin"]] <= hi


def test_loader_field_rules():
    raws = [
        _raw(),
        _raw("nan"),
        _raw("B0TOOLONG123"),
        _raw(),
        _raw("B000000002", pricing=""),
        _raw("B000000003", pricing="$5.00 - $9.00", small_description="one bullet"),
    ]
    cat = catalogue_from_records(raws, {"B000000001": {"attributes": ["x"]}}, None, price_seed=0)
    assert [p["asin"] for p in cat.products] == ["B000000001", "B000000002", "B000000003"]
    p1, p2, p3 = cat.products
    assert p1["options"] == {"color": ["navy | blue"]} and p1["query"] == "shampoo"
    assert p1["Price"] == "$12.5" and cat.prices["B000000001"] == 12.5
    assert p1["Attributes"] == ["x"] and p2["Attributes"] == ["DUMMY_ATTR"]
    assert p2["pricing"] == [100.0] and cat.prices["B000000002"] == 100.0
    assert p3["Price"] == "$5.0 to $9.0" and 5.0 <= cat.prices["B000000003"] <= 9.0
    assert p3["BulletPoints"] == ["one bullet"]
    assert product_document(p1) == "lumo shampoo d b1 color: navy | blue"


def test_bad_records_name_the_file_and_the_record(tmp_path):
    path = tmp_path / "items_shuffle.json"
    path.write_text(json.dumps([_raw(), _raw("B000000009", name=None)]))
    with pytest.raises(
        ValueError,
        match=r"items_shuffle\.json: record 1 \(asin 'B000000009'\)"
        r": field 'name' must be a string",
    ):
        load_catalogue(tmp_path)
    path.write_text(json.dumps([_raw(pricing="free")]))
    with pytest.raises(ValueError, match=r"record 0 .*'pricing' must look like"):
        load_catalogue(tmp_path)
    path.write_text("[{")
    with pytest.raises(ValueError, match=r"items_shuffle\.json: not valid JSON"):
        load_catalogue(tmp_path)
    path.write_text(json.dumps([_raw()]))
    (tmp_path / "items_human_ins.json").write_text(json.dumps({"B000000001": [{"x": 1}]}))
    with pytest.raises(
        ValueError,
        match=r"items_human_ins\.json: record for asin 'B000000001', "
        r"instruction 0",
    ):
        load_catalogue(tmp_path)


def test_missing_files_are_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_data_files(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=r"No items_shuffle\*\.json"):
        find_data_files(tmp_path)
    (tmp_path / "items_shuffle_1000.json").write_text("[]")
    (tmp_path / "items_shuffle.json").write_text("[]")
    assert find_data_files(tmp_path)["products"].name == "items_shuffle.json"


def test_price_bound_rule():
    rng = random.Random(0)
    seen = set()
    for _ in range(200):
        upper, text = price_bound(35.0, rng)  # candidates 40, 50, 60, 70
        assert upper in (50.0, 60.0, 70.0)  # the larger of two picks is never the smallest
        assert text == f", and price lower than {upper:.2f} dollars"
        seen.add(upper)
    assert seen == {50.0, 60.0, 70.0}
    assert price_bound(985.0, rng) == (NO_PRICE_BOUND, "")  # only 990 is above
    assert price_bound(975.0, rng)[0] == 990.0  # 980 and 990: the larger


def test_human_goals(written):
    cat = load_catalogue(written)
    goals = make_goals(cat, human=True, seed=0)
    assert len(goals) == 600
    keys = {
        "asin",
        "category",
        "query",
        "name",
        "product_category",
        "instruction_text",
        "attributes",
        "price_upper",
        "goal_options",
        "weight",
    }
    assert all(set(g) == keys and g["attributes"] for g in goals)
    assert make_goals(cat, human=True, seed=0) == goals  # seeded shuffle
    assert [g["asin"] for g in make_goals(cat, shuffle_seed=1)] != [g["asin"] for g in goals]


def test_human_goals_skip_empty_attributes_and_strip_periods():
    raws = [_raw(pricing="$985.00")]
    human = {
        "B000000001": [
            {
                "instruction": "i want shampoo.",
                "instruction_attributes": ["x"],
                "instruction_options": ["navy | blue"],
            },
            {"instruction": "skip me", "instruction_attributes": [], "instruction_options": []},
        ]
    }
    goals = make_goals(catalogue_from_records(raws, None, human))
    assert len(goals) == 1
    assert goals[0]["instruction_text"] == "i want shampoo"
    assert goals[0]["price_upper"] == NO_PRICE_BOUND


def test_synthetic_goals_one_per_option_combination():
    raws = [
        _raw(
            customization_options={
                "size": [{"value": "s"}, {"value": "m"}],
                "color": [{"value": "red"}, {"value": "blue"}, {"value": "green"}],
            }
        )
    ]
    ins = {
        "B000000001": {
            "attributes": ["a", "b"],
            "instruction": "i want shampoo",
            "instruction_attributes": ["a"],
        }
    }
    goals = synthetic_goals(catalogue_from_records(raws, ins, None, price_seed=0))
    assert len(goals) == 6
    assert goals[0]["goal_options"] == {"color": "red", "size": "s"}
    assert goals[0]["instruction_text"].startswith("i want shampoo with color: red, and size: s")
    assert all(g["weight"] == 1 / 6 for g in goals)


def test_standard_splits():
    assert split_indices(2000, "test") == range(0, 500)
    assert split_indices(2000, "eval") == range(500, 1500)
    assert split_indices(2000, "train") == range(1500, 2000)
    assert split_indices(700, "train") == range(1500, 700) and len(split_indices(700, "train")) == 0
    assert split_indices(700, "eval") == range(500, 700)
    assert split_indices(700, "all") == range(700)
    with pytest.raises(ValueError, match=r"Unknown WebShop split 'dev'"):
        split_indices(10, "dev")


def test_bm25_search(written):
    cat = load_catalogue(written)
    index = SearchIndex(cat.documents())
    hits = index.search("sulfate free shampoo")
    assert 0 < len(hits) <= 50
    assert cat.products[hits[0]]["query"] == "shampoo"
    assert index.search("sulfate free shampoo") == hits  # deterministic
    everything = " ".join(t.query for t in PRODUCT_TYPES)  # every product matches
    assert len(index.search(everything)) == 50  # capped at 50
    assert index.search("zzzz qqqq") == [] and index.search("the and of") == []
