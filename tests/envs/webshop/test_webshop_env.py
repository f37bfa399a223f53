"""The page state machine, text observations, the MEM1 turn format and memrl/WebShop-v0."""

from __future__ import annotations

import pytest

from memrl.envs import make_env
from memrl.envs.webshop import (
    CatalogueSpec,
    ScriptedShopper,
    WebShopEngine,
    WebShopEnv,
    evaluate_shopper,
    get_reward,
    get_world,
)

SPEC = CatalogueSpec(num_products=1000, seed=0)


@pytest.fixture(scope="module")
def world():
    return get_world(SPEC)


@pytest.fixture
def engine(world):
    return WebShopEngine(world)


def _session(engine, world, goal_index=3):
    return engine.new_session(world.goal(goal_index))


def _query_with_many_results(engine, world):
    for g in world.goals:
        s = engine.new_session(g)
        engine.step(s, f"search[{world.product(g['asin'])['query']}]")
        if len(s.results) > 20:
            return s
    raise AssertionError("no query with more than 20 results")


def test_start_page(engine, world):
    s = _session(engine, world)
    ins = world.goal(3)["instruction_text"]
    assert engine.observation(s) == f"WebShop [SEP] Instruction: [SEP] {ins} [SEP] Search"
    assert engine.available_actions(s) == {"has_search_bar": True, "clickables": ["search"]}
    r = engine.step(s, "click[search]")
    assert not r.valid and s.page == "search"


def test_results_paging_and_back(engine, world):
    s = _query_with_many_results(engine, world)
    total = len(s.results)
    obs = engine.observation(s)
    assert f"Page 1 (Total results: {total})" in obs
    acts = engine.available_actions(s)
    assert not acts["has_search_bar"]
    assert acts["clickables"][:2] == ["back to search", "next >"]
    assert "< prev" not in acts["clickables"]
    assert acts["clickables"][2:] == [a.lower() for a in s.results[:10]]
    assert engine.step(s, "click[Next >]").valid and s.page_num == 2
    assert engine.available_actions(s)["clickables"][1:3] == ["< prev", "next >"]
    assert engine.available_actions(s)["clickables"][3:] == [a.lower() for a in s.results[10:20]]
    assert engine.step(s, "click[< prev]").valid and s.page_num == 1
    assert engine.step(s, "click[back to search]").valid and s.page == "search"


def test_item_options_subpages_and_buy(engine, world):
    s = _session(engine, world, 3)
    engine.step(s, "search[nightstand]")
    asin = s.results[0]
    product = world.product(asin)
    assert engine.step(s, f"click[{asin.lower()}]").valid and s.page == "item"
    obs = engine.observation(s)
    assert obs.split(" [SEP] ")[2:4] == ["Back to Search", "< Prev"]
    assert obs.endswith(
        f"{product['Title']} [SEP] Price: {product['Price']} [SEP] Rating: N.A. "
        "[SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    name, values = next(iter(product["options"].items()))
    assert engine.step(s, f"click[{values[-1]}]").valid
    assert s.options == {name: values[-1]}
    rich = engine.observation(s, "text_rich")
    assert rich.startswith(f"You have clicked {values[-1]}.")
    assert f"[clicked button] {values[-1]} [clicked button_]" in rich
    assert engine.step(s, "click[description]").valid and s.page == "sub"
    assert engine.observation(s).endswith(f"< Prev [SEP] {product['Description']}")
    assert engine.step(s, "click[< prev]").valid and s.page == "item"
    assert s.options == {name: values[-1]}  # kept across sub-pages
    engine.step(s, "click[features]")
    assert engine.observation(s).endswith(" [SEP] ".join(product["BulletPoints"]))
    engine.step(s, "click[< prev]")
    r = engine.step(s, "click[Buy Now]")
    expected = get_reward(product, s.goal, world.price(asin), {name: values[-1]})
    assert r.done and r.valid and r.reward == expected and s.page == "done"
    assert engine.available_actions(s)["clickables"] == []
    assert not engine.step(s, "search[more]").valid


def test_item_prev_returns_to_results_and_clears_options(engine, world):
    s = _session(engine, world, 3)
    engine.step(s, "search[nightstand]")
    engine.step(s, f"click[{s.results[0].lower()}]")
    first_value = next(iter(world.product(s.asin)["options"].values()))[0]
    engine.step(s, f"click[{first_value}]")
    assert engine.step(s, "click[< prev]").valid
    assert s.page == "results" and s.options == {} and s.asin is None


def test_invalid_actions_are_noops_with_a_message(engine, world):
    s = _session(engine, world)
    engine.step(s, "search[nightstand]")
    before = engine.observation(s)
    for bad in ("click[buy now]", "click[b0notthere]", "jump[x]", "search[]", "hello"):
        r = engine.step(s, bad)
        assert not r.valid and r.reward == 0 and not r.done and r.message
        assert engine.observation(s) == before
    # The original allows search[...] from any page.
    engine.step(s, f"click[{s.results[0].lower()}]")
    assert engine.step(s, "search[bookshelf]").valid and s.page == "results"


def test_env_mem1_format_full_episode():
    env = make_env("memrl/WebShop-v0", {"split": "test", "num_products": 1000})
    obs, info = env.reset(options={"task_index": 3})
    assert obs.startswith("<state>[HINT]You have 10 turns left.[/HINT]\nWebShop [SEP]")
    assert obs.endswith("Current available actions: [search[<keywords>]]</state>")
    assert info["task_id"] == "webshop/test/3" and info["max_turns"] == 10
    assert info["task"]["instruction"] in obs
    base = env.unwrapped
    shopper = ScriptedShopper(base.engine)
    reward, steps, done = 0.0, 0, False
    while not done:
        for action in shopper.plan(base.session):
            obs, reward, term, trunc, info = env.step(
                f"<think>t</think>\n<summary>s</summary>\n<answer>{action}</answer>"
            )
            steps += 1
            assert not info["format_error"] and info["valid"]
            done = term or trunc
            if done:
                break
    assert term and not trunc
    assert reward == info["score"] > 0 and info["success"] == (reward == 1.0)
    assert steps < 10
    assert set(info["reward_info"]) >= {
        "r_type",
        "r_att",
        "r_option",
        "r_price",
        "title_score",
        "query_match",
        "category_match",
    }


def test_env_page_listing_and_invalid_action_message():
    env = WebShopEnv(split="test", max_turns=10)
    env.reset(options={"task_index": 0})
    obs, r, term, trunc, info = env.step(
        "<think>a</think><summary>b</summary><answer>search[shampoo]</answer>"
    )
    assert "click[back to search], click[next >]" in obs and "search[<keywords>]" not in obs
    obs, r, term, trunc, info = env.step(
        "<think>a</think><summary>b</summary><answer>click[nothing]</answer>"
    )
    assert r == 0 and not term and not info["format_error"] and not info["valid"]
    assert "Invalid action: click[nothing] is not on this page" in obs
    assert "You have 8 turns left." in obs


@pytest.mark.parametrize(
    "turn",
    [
        "search[shampoo]",
        "<answer>search[shampoo]</answer>",
        "<think>a</think><summary>b</summary><answer>buy it</answer>",
        "<think>a</think><summary>b</summary><answer>search[x]</answer><answer>click[y]</answer>",
        "<think>a</think><think>a</think><summary>b</summary><answer>search[x]</answer>",
    ],
)
def test_env_format_errors_end_with_penalty(turn):
    env = WebShopEnv(split="test", format_penalty=-1.0)
    env.reset(options={"task_index": 0})
    obs, r, term, trunc, info = env.step(turn)
    assert r == -1.0 and term and info["format_error"]
    assert "Invalid response format" in obs


def test_env_truncates_at_max_turns_and_custom_tags():
    env = WebShopEnv(split="test", max_turns=2, think_tag="IS", summary_tag="sum")
    env.reset(options={"task_index": 0})
    turn = "<IS>a</IS><sum>b</sum><answer>search[shampoo]</answer>"
    obs, r, term, trunc, info = env.step(turn)
    assert not trunc and "You have 1 turn left." in obs and "click[buy now]" in obs
    obs, r, term, trunc, info = env.step(turn)
    assert trunc and not term and r == 0.0


def test_env_raw_mode_and_text_rich():
    env = WebShopEnv(split="test", action_format="raw", observation_mode="text_rich")
    obs, _ = env.reset(options={"task_index": 1})
    assert obs == env.engine.observation(env.session, "text_rich")
    assert "[button] Search [button_]" in obs
    obs, r, term, trunc, info = env.step("search[shampoo]")
    assert "[button] Back to Search [button_]" in obs and "\n[button] B0" in obs
    assert env.available_actions()["clickables"][0] == "back to search"


def test_env_shares_one_world_per_process():
    a = WebShopEnv(split="test")
    b = WebShopEnv(split="eval")
    assert a.world is b.world
    assert len(a.task_indices) == 500 and len(b.task_indices) == 1000


def test_env_config_errors():
    with pytest.raises(ValueError, match="does not fit memrl/WebShop-v0"):
        make_env("memrl/WebShop-v0", {"colour": 1})
    with pytest.raises(ValueError, match="observation_mode='html'"):
        WebShopEnv(observation_mode="html")
    with pytest.raises(ValueError, match="Split 'train' is empty"):
        WebShopEnv(num_products=200, split="train")
    env = WebShopEnv(split="test")
    with pytest.raises(ValueError, match=r"task_index 500 is outside split 'test' \(0\.\.499\)"):
        env.reset(options={"task_index": 500})


def test_scripted_shopper_scores(world):
    score = evaluate_shopper(world, "test", limit=100)
    assert score["episodes"] == 100
    assert 0.6 < score["avg_reward"] <= 1.0 and 0.2 < score["success_rate"] < 1.0


def test_lone_surrogates_in_the_catalogue_never_reach_an_observation(tmp_path):
    from memrl.envs.webshop.generator import generate_catalogue

    paths = generate_catalogue(tmp_path, 150, seed=4)
    products = paths["products"].read_text()
    paths["products"].write_text(products.replace('"name": "', '"name": "\\ud800 '))
    for action_format in ("mem1", "raw"):
        env = WebShopEnv(data_dir=str(tmp_path), num_products=None, seed=4, split="all",
                         action_format=action_format)  # fmt: skip
        env.reset(options={"task_index": 0})
        action = "search[shampoo hair oil soap]"
        if action_format == "mem1":
            action = f"<think>t</think><summary>s</summary><answer>{action}</answer>"
        obs, *_ = env.step(action)
        assert "\ufffd" in obs and obs.encode("utf-8")
