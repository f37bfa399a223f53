"""Text processing shared by WebShop's reward and search: nouns, colours, fuzzy matching, tokens.

The original reward tags nouns with spaCy's ``en_core_web_lg`` and compares strings with
``thefuzz``; neither is installable here. This module holds the deterministic replacements:

- ``title_nouns``: a rule-based noun tagger for product titles (see its docstring for the rules);
- ``token_set_ratio``: thefuzz's ``fuzz.token_set_ratio`` reproduced with rapidfuzz (same
  pre-processing, same rounding to an int);
- ``normalize_color``: a string that contains a known colour name becomes that colour name;
- ``search_tokens``: the analyzer of the BM25 index (lower-case, stop words, plural stemming).
"""

from __future__ import annotations

import re
from functools import lru_cache

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

# --- nouns -----------------------------------------------------------------------------------

_TITLE_TOKEN = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*")

# Closed-class words spaCy never tags NOUN/PROPN in titles: determiners, pronouns, prepositions,
# conjunctions, auxiliaries, and a few frequent particles.
_FUNCTION_WORDS = frozenset(
    """
    a an the this that these those my your his her its our their some any each every all both
    no not nor and or but so yet for of in on at by to from with without into onto upon over
    under above below between among about against along around across through during before
    after behind beyond near off out up down via per plus than as is are was were be been being
    am do does did has have had will would can could should may might must shall it i you he she
    we they me him us them who whom whose which what when where why how also only just very too
    more most less least much many few own same other such s t x vs etc amp
    """.split()
)

# Frequent title adjectives (spaCy tags them ADJ). Colour words are left out on purpose: in
# title case spaCy mostly tags them PROPN.
_ADJECTIVES = frozenset(
    """
    new best great good premium natural organic pure fresh soft hard light dark heavy large small
    big little mini long short wide slim thin thick tall high low extra super ultra easy quick fast
    slow hot cold warm cool dry wet clean smooth strong durable portable adjustable waterproof
    wireless compatible professional classic modern vintage casual formal comfortable cute
    elegant stylish lightweight breathable foldable reusable rechargeable stainless free non
    vegan healthy delicious sweet spicy salty crunchy creamy rich full half double single multi
    multiple universal original authentic real true perfect ideal unique special beautiful pretty
    simple basic deluxe luxury anti
    """.split()
)

_ADJECTIVE_SUFFIXES = ("ly", "ful", "ous", "ive", "able", "ible", "ish", "less")
_VERB_SUFFIXES = ("ed", "ing")
_NOUN_ENDINGS_KEEP = ("ring", "thing", "ceiling", "clothing", "bedding", "seasoning")


def title_tokens(name: str) -> list[str]:
    """Lower-cased word tokens of a title; dotted abbreviations ("d.o.n.") stay one token."""
    return _TITLE_TOKEN.findall(name.lower())


def _is_noun(token: str) -> bool:
    if not any(c.isalpha() for c in token) or token[0].isdigit():
        return False
    if token in _FUNCTION_WORDS or token in _ADJECTIVES:
        return False
    if len(token) > 4 and token.endswith(_VERB_SUFFIXES) and not token.endswith(_NOUN_ENDINGS_KEEP):
        return False
    return not (len(token) > 5 and token.endswith(_ADJECTIVE_SUFFIXES))


@lru_cache(maxsize=65536)
def _title_nouns_cached(name: str) -> tuple[str, ...]:
    return tuple(t for t in title_tokens(name) if _is_noun(t))


def title_nouns(name: str) -> list[str]:
    """The noun and proper-noun tokens of a product title, lower-cased, in order, with repeats.

    A deterministic stand-in for spaCy's ``t.pos_ in ('NOUN', 'PROPN')`` on titles, which in
    title case tags most content words as nouns or proper nouns. Rules, in order: tokens are runs
    of letters/digits (internal "." and "'" kept, so "d.o.n" and "l'eau" are one token); a token is
    NOT a noun if it has no letter or starts with a digit (quantities: "16oz", "2pcs", "3.1"), is
    a function word (determiners, pronouns, prepositions, conjunctions, auxiliaries), is one of
    ~110 frequent title adjectives, ends in -ed/-ing (participles; a few nouns such
    as "ring" and "clothing" are kept) or ends in -ly/-ful/-ous/-ive/-able/-ible/-ish/-less. Every
    other token is a noun. Repeats are kept because the reward divides by the length of the goal's
    noun list, not of its set (as the original does).
    """
    return list(_title_nouns_cached(name))


# --- colours ---------------------------------------------------------------------------------

# Multi-word names first so that "navy blue" stays "navy blue" rather than becoming "blue".
COLOR_NAMES: tuple[str, ...] = (
    "rose gold",
    "navy blue",
    "sky blue",
    "light blue",
    "dark blue",
    "royal blue",
    "light grey",
    "dark grey",
    "light gray",
    "dark gray",
    "hot pink",
    "light pink",
    "dark green",
    "army green",
    "olive green",
    "lime green",
    "wine red",
    "off white",
    "space gray",
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "azure",
    "beige",
    "black",
    "blue",
    "blush",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "charcoal",
    "chocolate",
    "coffee",
    "copper",
    "coral",
    "cream",
    "cyan",
    "denim",
    "emerald",
    "fuchsia",
    "gold",
    "gray",
    "green",
    "grey",
    "indigo",
    "ivory",
    "khaki",
    "lavender",
    "lilac",
    "magenta",
    "maroon",
    "mint",
    "mustard",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pink",
    "plum",
    "purple",
    "red",
    "rose",
    "rust",
    "salmon",
    "sand",
    "silver",
    "tan",
    "taupe",
    "teal",
    "turquoise",
    "violet",
    "white",
    "wine",
    "yellow",
)


def normalize_color(value: str) -> str:
    """Returns the first known colour name that ``value`` contains, else ``value`` unchanged.

    As in the original, this is a plain substring test over an ordered list (multi-word names
    first), so "dark navy blue stripe" becomes "navy blue" and "redwood" becomes "red".
    """
    for color in COLOR_NAMES:
        if color in value:
            return color
    return value


# --- fuzzy matching --------------------------------------------------------------------------


# thefuzz's "force_ascii" removes exactly the code points 128-255 (its ascii_only); any other
# non-ASCII character stays for default_process, which keeps letters and digits of every script
# and turns everything else (e.g. U+2019, the typographic apostrophe) into a space.
_LATIN1_SUPPLEMENT = dict.fromkeys(range(128, 256))


def _full_process(s: str) -> str:
    # thefuzz.utils.full_process(s, force_ascii=True), step for step.
    return default_process(s.translate(_LATIN1_SUPPLEMENT))


@lru_cache(maxsize=262144)
def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's ``fuzz.token_set_ratio(a, b)``: an int in [0, 100] (rounded like thefuzz)."""
    return int(round(fuzz.token_set_ratio(_full_process(a), _full_process(b))))


# --- search analyzer -------------------------------------------------------------------------

_SEARCH_TOKEN = re.compile(r"[a-z0-9]+")

# Lucene's classic English stop-word set (the analyzer pyserini indexes WebShop with).
SEARCH_STOPWORDS = frozenset(
    """
    a an and are as at be but by for if in into is it no not of on or such that the their then
    there these they this to was will with
    """.split()
)


def stem(token: str) -> str:
    """A minimal English plural stemmer (after Lucene's EnglishMinimalStemmer)."""
    n = len(token)
    if n < 3 or token[-1] != "s" or token[-2] in "us":
        return token
    if token[-2] == "e":
        if n > 3 and token[-3] == "i" and token[-4] not in "ae":
            return token[:-3] + "y"
        if token[-3] in "iaoe":
            return token
    return token[:-1]


def search_tokens(text: str) -> list[str]:
    """Analyzes text for BM25: lower-case alphanumeric runs, stop words removed, plurals stemmed."""
    return [stem(t) for t in _SEARCH_TOKEN.findall(text.lower()) if t not in SEARCH_STOPWORDS]
