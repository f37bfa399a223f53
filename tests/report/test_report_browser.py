"""The report in real headless Chromium: it loads without console errors, is not blank, and its
transcript browser and replay player respond to clicks."""

from __future__ import annotations

import io

import pytest
from chromium_testing import chromium_driver
from report_helpers import make_key_door_run, make_mem1_run

from memrl.experiment.run_report import write_run_report


@pytest.fixture(scope="module")
def browser():
    with chromium_driver(
        "--window-size=1280,1600", capabilities={"goog:loggingPrefs": {"browser": "ALL"}}
    ) as driver:
        yield driver


def _open(driver, page):
    driver.get(page.resolve().as_uri())
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert not errors, errors


def _not_blank(driver):
    import matplotlib.image

    pixels = matplotlib.image.imread(io.BytesIO(driver.get_screenshot_as_png()), format="png")
    rgb = pixels[..., :3]
    # Text, figures and tables: a good share of pixels differ from the page background.
    background = rgb[5, 5]
    share = float((abs(rgb - background).sum(axis=-1) > 0.1).mean())
    assert share > 0.05, f"only {share:.3f} of the screenshot is not background"


def _text(driver, css):
    return driver.find_element("css selector", css).text


def test_replay_player(tmp_path, browser):
    from selenium.webdriver.support.ui import Select, WebDriverWait

    _open(browser, write_run_report(make_key_door_run(tmp_path)))
    _not_blank(browser)
    assert browser.find_element("css selector", "#training svg").size["height"] > 200
    status = _text(browser, "#replay-status")
    assert status.startswith("step 0 / 10 · inner episode 1")
    # The first inner episode searched (6 steps), the second went straight (4).
    rows = browser.find_elements("css selector", "#replay-inner tbody tr")
    assert [r.text for r in rows] == ["1 6 2", "2 4 2"]

    def canvas():
        return browser.execute_script(
            "return document.getElementById('replay-canvas').toDataURL();"
        )

    before = canvas()
    browser.find_element("id", "replay-next").click()
    assert _text(browser, "#replay-status").startswith("step 1 / 10")
    assert canvas() != before
    browser.find_element("id", "replay-play").click()
    WebDriverWait(browser, 20).until(
        lambda d: d.find_element("id", "replay-step").get_attribute("value") == "10"
    )
    assert _text(browser, "#replay-status").startswith("step 10 / 10 · inner episode 2")
    assert "return so far 4" in _text(browser, "#replay-status")
    Select(browser.find_element("id", "replay-trial")).select_by_index(1)
    assert browser.find_element("id", "replay-step").get_attribute("value") == "0"
    assert _text(browser, "#replay-status").startswith("step 0 / 10")


def test_transcript_browser(tmp_path, browser):
    _open(browser, write_run_report(make_mem1_run(tmp_path)))
    _not_blank(browser)
    items = browser.find_elements("css selector", "#episode-list li")
    assert [i.text.splitlines()[0] for i in items] == ["✓ task-0", "✗ task-1", "✓ task-2"]
    assert "selected" in items[0].get_attribute("class")
    assert _text(browser, "#episode-view h3") == "Episode task-0"
    turns = browser.find_elements("css selector", "#episode-view .turn")
    assert len(turns) == 4
    assert turns[2].find_element("tag name", "h4").text == "Turn 3 · 75 tokens kept, 30 dropped"
    assert "facts known after turn 2" in turns[2].find_element("css selector", ".state").text
    summaries = [e.text for e in turns[2].find_elements("tag name", "summary")]
    assert summaries[:2] == [
        "Context the model saw: the prompt + turn 2 (turn 1 dropped)",
        "Dropped from the context: turn 1",
    ]
    assert turns[3].find_element("css selector", ".action").text == "answer: Paris; 1889"
    dropped = turns[3].find_elements("css selector", "details")[1]
    assert dropped.find_element("tag name", "summary").text == (
        "Dropped from the context: turns 1–2"
    )
    dropped.find_element("tag name", "summary").click()
    assert "query 0" in dropped.text and "query 1" in dropped.text

    items[1].click()
    assert _text(browser, "#episode-view h3") == "Episode task-1"
    assert "selected" in items[1].get_attribute("class")
    assert "selected" not in items[0].get_attribute("class")
    assert len(browser.find_elements("css selector", "#episode-view .turn")) == 3
