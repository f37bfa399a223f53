"""The WebShop web site driven by real headless Chromium (Selenium) against 127.0.0.1."""

from __future__ import annotations

import json
import urllib.request

import pytest
from chromium_testing import chromium_driver

from memrl.envs.webshop import CatalogueSpec, ScriptedShopper, WebShopEngine, get_world
from memrl.envs.webshop.site import WebShopSite, start_server

SPEC = CatalogueSpec(num_products=1000, seed=0)


@pytest.fixture(scope="module")
def server():
    world = get_world(SPEC)
    site = WebShopSite(WebShopEngine(world), world.split("test"))
    srv = start_server(site, "127.0.0.1", 0)
    yield world, site, srv.url
    srv.stop()


@pytest.fixture(scope="module")
def browser():
    with chromium_driver() as driver:
        yield driver


def _page(driver) -> str:
    return driver.find_element("tag name", "body").get_attribute("data-page")


def _click(driver, element) -> None:
    """Clicks and waits for the page that the form submission or link loads."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element("tag name", "body")
    element.click()

    def replaced(_driver) -> bool:
        # Chromium reports a node of the old document as stale, or (mid-navigation) as "not in
        # the document": both mean the new page has replaced it.
        try:
            return expected_conditions.staleness_of(old)(_driver)
        except WebDriverException:
            return True

    WebDriverWait(driver, 20).until(replaced)
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


@pytest.mark.parametrize("goal", [3, 11])
def test_browser_shopping_matches_text_env_reward(server, browser, goal):
    from selenium.webdriver.common.by import By

    world, site, base = server
    engine = WebShopEngine(world)
    session = engine.new_session(world.goal(world.split("test")[goal]))
    shopper = ScriptedShopper(engine)

    browser.get(f"{base}/?goal={goal}")
    assert _page(browser) == "search"
    assert browser.find_element(By.ID, "instruction").text == session.goal["instruction_text"]
    actions = []
    while not session.done:
        for action in shopper.plan(session):
            actions.append(action)
            engine.step(session, action)
            name, arg = action.split("[", 1)
            arg = arg[:-1]
            if name == "search":
                box = browser.find_element(By.ID, "search_input")
                box.send_keys(arg)
                _click(browser, browser.find_element(By.ID, "search-button"))
                assert _page(browser) == "results"
                links = [
                    a.text.lower() for a in browser.find_elements(By.CLASS_NAME, "product-link")
                ]
                assert links == [a.lower() for a in session.results[:10]]
            elif (
                session.page == "item"
                and arg not in ("buy now",)
                and browser.find_elements(By.CSS_SELECTOR, f"input[type=radio][value='{arg}']")
            ):
                _click(
                    browser,
                    browser.find_element(By.CSS_SELECTOR, f"input[type=radio][value='{arg}']"),
                )
                radio = browser.find_element(By.CSS_SELECTOR, f"input[type=radio][value='{arg}']")
                assert radio.is_selected()  # the page reloaded with the option chosen
            elif arg.startswith("b0"):
                _click(browser, browser.find_element(By.LINK_TEXT, arg.upper()))
                assert _page(browser) == "item"
            else:
                _click(browser, browser.find_element(By.CSS_SELECTOR, f"button[value='{arg}']"))
    assert actions[-1] == "click[buy now]"
    assert _page(browser) == "done"
    site_reward = float(browser.find_element(By.ID, "reward").text)
    assert site_reward == session.reward
    sid = browser.current_url.rstrip("/").rsplit("/", 1)[-1]
    with urllib.request.urlopen(f"{base}/s/{sid}/state.json") as resp:
        state = json.load(resp)
    assert state["done"] and state["options"] == session.options and state["asin"] == session.asin


def test_browser_paging_subpages_and_back(server, browser):
    from selenium.webdriver.common.by import By

    world, site, base = server
    browser.get(f"{base}/?goal=0")
    browser.find_element(By.ID, "search_input").send_keys("shampoo")
    _click(browser, browser.find_element(By.ID, "search-button"))
    first_page = [a.text for a in browser.find_elements(By.CLASS_NAME, "product-link")]
    _click(browser, browser.find_element(By.CSS_SELECTOR, "button[value='next >']"))
    second_page = [a.text for a in browser.find_elements(By.CLASS_NAME, "product-link")]
    assert "Page 2" in browser.page_source and set(first_page).isdisjoint(second_page)
    _click(browser, browser.find_element(By.LINK_TEXT, second_page[0]))
    _click(browser, browser.find_element(By.CSS_SELECTOR, "button[value='description']"))
    assert world.product(second_page[0])["Description"] in browser.page_source
    _click(browser, browser.find_element(By.CSS_SELECTOR, "button[value='< prev']"))
    assert _page(browser) == "item"
    _click(browser, browser.find_element(By.CSS_SELECTOR, "button[value='back to search']"))
    assert _page(browser) == "search"


def test_unknown_session_is_404(server):
    _, _, base = server
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{base}/s/nope")
    assert err.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{base}/?goal=100000")
    assert err.value.code == 400


def test_oldest_sessions_are_dropped_past_the_cap():
    world = get_world(SPEC)
    site = WebShopSite(WebShopEngine(world), world.split("test"), max_sessions=2)
    first, second, third = (site.new_session(i) for i in range(3))
    assert list(site.sessions) == [second, third]
    assert site.state(third)["instruction"] == world.goal(2)["instruction_text"]
    with pytest.raises(ValueError, match=r"goal must be in 0\.\.499, got 500"):
        site.new_session(500)
