"""WebShop's page state machine: sessions, actions, pages as elements, text observations.

One engine serves both faces of WebShop: the text env renders a page's elements as text, the web
site (``memrl.serve.webshop``) renders the same elements as HTML. Page flow (as the original):

``search`` (instruction + search box) --search[...]--> ``results`` (top 50, 10 per page,
``next >``, ``< prev``, ``back to search``, product asins) --click[asin]--> ``item`` (options,
title, price, rating, ``description``, ``features``, ``reviews``, ``buy now``) --click[...]-->
``sub`` pages (``< prev`` back to the item) --click[buy now]--> ``done`` with the reward.

As in the original, ``search[...]`` works on every page (it is not tied to the search box) and
``click[x]`` works only when ``x`` is a current clickable; anything else is a no-op.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from memrl.envs.text import echo
from memrl.envs.webshop.reward import get_reward_verbose

PRODUCTS_PER_PAGE = 10
BUY_NOW = "buy now"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
BACK_TO_SEARCH = "back to search"
SUB_PAGES = ("description", "features", "reviews", "attributes")
OBSERVATION_MODES = ("text", "text_rich")


class World(Protocol):
    """What the engine needs from a world (local ``WebShopWorld`` or a ``RemoteWorld``)."""

    def search(self, query: str, k: int = ...) -> list[str]: ...
    def product(self, asin: str) -> dict[str, Any]: ...
    def price(self, asin: str) -> float: ...


@dataclass(frozen=True)
class Element:
    """One visible piece of a page."""

    kind: str
    """``text``, ``button``, ``link`` (product asin), ``option`` or ``search`` (the search box)."""
    text: str
    """What is shown (buttons in their display case, e.g. "Buy Now")."""
    value: str = ""
    """What ``click[...]`` takes (lower-cased) for clickables; empty for text."""
    group: str = ""
    """Option name, for options."""
    selected: bool = False
    """Chosen option / visited product."""


@dataclass
class Session:
    """The state of one shopper."""

    goal: dict[str, Any]
    session_id: str = ""
    page: str = "search"
    keywords: str = ""
    results: list[str] = field(default_factory=list)
    page_num: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub_page: str | None = None
    visited: set[str] = field(default_factory=set)
    done: bool = False
    reward: float = 0.0
    reward_info: dict[str, Any] | None = None
    num_actions: int = 0


@dataclass(frozen=True)
class StepResult:
    """What one action did."""

    reward: float
    done: bool
    valid: bool
    message: str = ""


def parse_action(action: str) -> tuple[str, str | None]:
    """``"click[Buy Now]" -> ("click", "buy now")``: the argument is lower-cased.

    The argument runs from the last ``[`` that leaves a name before it and a character before the
    last ``]`` (what the original's ``(.+)\\[(.+)\\]`` matches), found in linear time.
    """
    text = action.strip()
    close = text.rfind("]")
    open_ = text.rfind("[", 1, close - 1) if close >= 2 else -1
    if open_ < 0:
        return text, None
    return text[:open_].strip(), text[open_ + 1 : close].lower()


class WebShopEngine:
    """Runs sessions against a world. Stateless itself: one engine can serve many sessions."""

    def __init__(self, world: World, show_attrs: bool = False) -> None:
        self.world = world
        self.show_attrs = show_attrs

    def new_session(self, goal: dict[str, Any], session_id: str = "") -> Session:
        return Session(goal=goal, session_id=session_id)

    # --- pages -------------------------------------------------------------------------------

    def elements(self, s: Session) -> list[Element]:
        """The visible elements of the session's current page, in page order."""
        instruction = s.goal["instruction_text"]
        if s.page == "search":
            return [
                Element("text", "WebShop"),
                Element("text", "Instruction:"),
                Element("text", instruction),
                Element("search", "Search", "search"),
            ]
        if s.page == "done":
            return self._done_elements(s)
        head = [
            Element("text", "Instruction:"),
            Element("text", instruction),
            Element("button", "Back to Search", BACK_TO_SEARCH),
        ]
        if s.page == "results":
            total = len(s.results)
            els = head + [Element("text", f"Page {s.page_num} (Total results: {total})")]
            if s.page_num > 1:
                els.append(Element("button", "< Prev", PREV_PAGE))
            if s.page_num * PRODUCTS_PER_PAGE < total:
                els.append(Element("button", "Next >", NEXT_PAGE))
            start = (s.page_num - 1) * PRODUCTS_PER_PAGE
            for asin in s.results[start : start + PRODUCTS_PER_PAGE]:
                product = self.world.product(asin)
                els += [
                    Element("link", asin, asin.lower(), selected=asin in s.visited),
                    Element("text", product["Title"]),
                    Element("text", product["Price"]),
                ]
            return els
        product = self.world.product(s.asin)
        els = head + [Element("button", "< Prev", PREV_PAGE)]
        if s.page == "item":
            for name, values in product["options"].items():
                els.append(Element("text", name))
                els += [
                    Element("option", v, v, group=name, selected=s.options.get(name) == v)
                    for v in values
                ]
            els += [
                Element("text", product["Title"]),
                Element("text", f"Price: {product['Price']}"),
                Element("text", f"Rating: {product['Rating']}"),
            ]
            for sub in SUB_PAGES[: 4 if self.show_attrs else 3]:
                els.append(Element("button", sub.capitalize(), sub))
            els.append(Element("button", "Buy Now", BUY_NOW))
            return els
        if s.sub_page == "description":
            els.append(Element("text", product["Description"]))
        elif s.sub_page == "features":
            els += [Element("text", b) for b in product["BulletPoints"]]
        elif s.sub_page == "reviews":
            for r in product["Reviews"]:
                els += [
                    Element("text", str(r.get("title", ""))),
                    Element("text", str(r.get("score", ""))),
                    Element("text", str(r.get("body", ""))),
                ]
        else:
            els += [Element("text", a) for a in product["Attributes"]]
        return els

    def _done_elements(self, s: Session) -> list[Element]:
        return [
            Element("text", "Thank you for shopping with us!"),
            Element("text", "Purchased"),
            Element("text", f"asin: {s.asin}"),
            Element("text", f"options: {json.dumps(s.options)}"),
            Element("text", "Your score (min 0.0, max 1.0)"),
            Element("text", f"{s.reward:.4f}"),
        ]

    def clickables(self, s: Session) -> dict[str, Element]:
        """click[...] argument -> element (options overwrite buttons, as in the original)."""
        return {e.value: e for e in self.elements(s) if e.kind != "text"}

    def available_actions(self, s: Session) -> dict[str, Any]:
        """``{"has_search_bar": bool, "clickables": [str]}`` (as the original's)."""
        return {"has_search_bar": s.page == "search", "clickables": list(self.clickables(s))}

    def observation(self, s: Session, mode: str = "text") -> str:
        """The page as text.

        ``text`` joins visible texts with " [SEP] "; ``text_rich`` puts one per line and marks
        buttons ``[button] x [button_]``, chosen options and visited products
        ``[clicked button] x [clicked button_]``.
        """
        elements = self.elements(s)
        if mode == "text":
            return " [SEP] ".join(e.text for e in elements)
        if mode != "text_rich":
            raise ValueError(f"Unknown observation mode {mode!r}. Available: {OBSERVATION_MODES}")
        out, clicked = [], []
        for e in elements:
            if e.kind == "text":
                out.append(e.text)
            elif e.kind == "option" and e.selected:
                out.append(f"  [clicked button] {e.text} [clicked button_]")
                clicked.append(f"You have clicked {e.text}.")
            elif e.kind == "option":
                out.append(f"  [button] {e.text} [button_]")
            elif e.kind == "link":
                tag = "clicked button" if e.selected else "button"
                out.append(f"\n[{tag}] {e.text} [{tag}_]")
            else:
                out.append(f"[button] {e.text} [button_]")
        return "".join(c + "\n" for c in clicked) + "\n".join(out)

    # --- actions -----------------------------------------------------------------------------

    def step(self, s: Session, action: str) -> StepResult:
        """Applies ``search[keywords]`` or ``click[element]``; invalid actions change nothing."""
        if s.done:
            return StepResult(0.0, True, False, "The episode is over: the purchase is done.")
        name, arg = parse_action(action)
        if name == "search":
            if not arg or not arg.strip():
                return StepResult(0.0, False, False, "search[...] needs keywords.")
            s.num_actions += 1
            self._search(s, arg, page_num=1)
            return StepResult(0.0, False, True)
        if name == "click":
            clickables = self.clickables(s)
            if arg is None or arg not in clickables or arg == "search":
                shown = [c for c in clickables if c != "search"]
                return StepResult(
                    0.0,
                    False,
                    False,
                    f"click[{echo(arg or '')}] is not on this page. Clickable now: {shown}"
                    + (" (type search[keywords] to search)" if s.page == "search" else ""),
                )
            s.num_actions += 1
            return self._click(s, clickables[arg])
        return StepResult(
            0.0,
            False,
            False,
            f"Unknown action {action[:80]!r}: use search[keywords] or click[element].",
        )

    def _search(self, s: Session, keywords: str, page_num: int) -> None:
        s.keywords = keywords
        s.results = self.world.search(keywords)
        s.page, s.page_num, s.asin, s.options, s.sub_page = "results", page_num, None, {}, None

    def _click(self, s: Session, e: Element) -> StepResult:
        if e.value == BACK_TO_SEARCH:
            s.page, s.keywords, s.results, s.asin, s.options = "search", "", [], None, {}
            s.sub_page, s.page_num = None, 1
        elif e.value == NEXT_PAGE and s.page == "results":
            s.page_num += 1
        elif e.value == PREV_PAGE and s.page == "results":
            s.page_num -= 1
        elif e.value == PREV_PAGE and s.page == "sub":
            s.page, s.sub_page = "item", None
        elif e.value == PREV_PAGE and s.page == "item":
            # Back to the results re-runs the search, which clears the chosen options.
            self._search(s, s.keywords, s.page_num)
        elif e.kind == "link":
            s.asin = e.text
            s.visited.add(e.text)
            s.page = "item"
        elif e.kind == "option":
            s.options[e.group] = e.value
        elif e.value in SUB_PAGES:
            s.page, s.sub_page = "sub", e.value
        elif e.value == BUY_NOW:
            return self._buy(s)
        return StepResult(0.0, False, True)

    def _buy(self, s: Session) -> StepResult:
        product = self.world.product(s.asin)
        reward, info = get_reward_verbose(product, s.goal, self.world.price(s.asin), s.options)
        s.page, s.done, s.reward, s.reward_info = "done", True, reward, info
        return StepResult(reward, True, True)
