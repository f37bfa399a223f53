"""Readable text of a page: title, main text (no navigation, scripts or styles), links, budget.

Parsing is BeautifulSoup with the lxml parser. The main region is the largest ``main``,
``article`` or ``[role=main]`` element when it holds a fair share of the body's text, else the
body; block elements become line breaks so that words of inline elements stay on one line.
Token counts are whitespace tokens (a model-free stand-in for the tokenizer's count).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urldefrag, urlsplit

from memrl.envs.web_search.policy import join_url

_DROP_TAGS = (
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "canvas",
    "iframe",
    "object",
    "embed",
    "nav",
    "header",
    "footer",
    "aside",
    "form",
    "button",
    "select",
    "input",
    "textarea",
    "head",
)
_DROP_ROLES = ("navigation", "banner", "contentinfo", "search", "menu", "menubar")
_BLOCK_TAGS = (
    "p",
    "div",
    "section",
    "article",
    "main",
    "li",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "tr",
    "table",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "pre",
    "blockquote",
    "figcaption",
    "hr",
    "br",
)
_MAIN_SHARE = 0.25
"""A main/article element is used when it holds at least this share of the body's text."""

TEXT_CONTENT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml")
"""Content types whose text the browser shows and we extract (others are skipped with a note)."""


@dataclass
class Page:
    """A page as the agent sees it (what the cache stores)."""

    url: str
    title: str = ""
    text: str = ""
    links: list[tuple[str, str]] = field(default_factory=list)
    """(link text, absolute URL), in page order."""
    status: int = 0
    content_type: str = ""
    notes: list[str] = field(default_factory=list)
    """Caveats shown with the page (cut at the size cap, load timed out...)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Page:
        data = dict(data)
        data["links"] = [tuple(link) for link in data.get("links", [])]
        return cls(**data)


def is_text_type(content_type: str) -> bool:
    kind = content_type.split(";")[0].strip().lower()
    return (
        not kind
        or any(kind.startswith(t) for t in TEXT_CONTENT_TYPES)
        or kind.endswith(("+xml", "+json"))
    )


def extract(
    html: str, base_url: str, max_links: int = 10
) -> tuple[str, str, list[tuple[str, str]]]:
    """Returns (title, main text, links) of an HTML document."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "lxml")
    title = " ".join(soup.title.get_text().split()) if soup.title else ""
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    for tag in soup.find_all(attrs={"role": list(_DROP_ROLES)}):
        tag.decompose()
    for tag in soup.find_all(attrs={"aria-hidden": "true"}):
        tag.decompose()
    for tag in soup.find_all(hidden=True):
        tag.decompose()
    body = soup.body or soup
    region = body
    body_len = len(body.get_text(" ", strip=True))
    candidates = body.find_all(["main", "article"]) + body.find_all(attrs={"role": "main"})
    if candidates:
        best = max(candidates, key=lambda t: len(t.get_text(" ", strip=True)))
        if len(best.get_text(" ", strip=True)) >= _MAIN_SHARE * body_len:
            region = best
    links = _links(region, base_url, max_links)
    for tag in region.find_all(_BLOCK_TAGS):
        if tag.name == "br":
            tag.replace_with("\n")
        else:
            tag.insert_before("\n")
            tag.insert_after("\n")
    lines = (" ".join(line.split()) for line in region.get_text("").split("\n"))
    text = "\n".join(line for line in lines if line)
    return title, text, links


def _links(region: Any, base_url: str, max_links: int) -> list[tuple[str, str]]:
    page = urldefrag(base_url)[0]
    seen: set[str] = set()
    links: list[tuple[str, str]] = []
    for anchor in region.find_all("a", href=True):
        joined = join_url(base_url, anchor["href"].strip())
        if joined is None:  # a link no URL parser accepts: not a link to offer
            continue
        url = urldefrag(joined)[0]
        if urlsplit(url).scheme not in ("http", "https") or url == page or url in seen:
            continue
        seen.add(url)
        links.append((" ".join(anchor.get_text(" ").split()) or url, url))
        if len(links) >= max_links:
            break
    return links


def count_tokens(text: str) -> int:
    return len(text.split())


def truncate_tokens(text: str, budget: int) -> tuple[str, int]:
    """Cuts text to ``budget`` whitespace tokens, keeping line breaks; returns (text, total)."""
    total = count_tokens(text)
    if total <= budget:
        return text, total
    kept: list[str] = []
    used = 0
    for line in text.split("\n"):
        words = line.split()
        if used + len(words) > budget:
            kept.append(" ".join(words[: budget - used]))
            break
        kept.append(line)
        used += len(words)
    return "\n".join(kept).rstrip(), total
