"""The schema of the synthetic world: vocabularies, relations, question templates, and how a
reader inverts them (parse a question, extract a fact from a passage).

``SyntheticKB`` (``synthetic.py``) renders passages and questions from these tables; the scripted
agent reads them back with ``parse_question`` and ``extract_fact``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "th", "sh"]
_VOWELS = ["a", "e", "i", "o", "u"]
_CODAS = ["", "", "n", "r", "l", "s"]
SYLLABLES = [o + v + c for o in _ONSETS for v in _VOWELS for c in dict.fromkeys(_CODAS)]

OCCUPATIONS = (
    "architect", "botanist", "cartographer", "chemist", "composer", "economist", "engineer",
    "geologist", "historian", "journalist", "librarian", "mathematician", "novelist", "painter",
    "pharmacist", "photographer", "physician", "pilot", "sculptor", "surveyor", "translator",
    "veterinarian", "violinist", "weaver", "astronomer", "carpenter", "diplomat", "linguist",
)  # fmt: skip
INDUSTRIES = (
    "shipbuilding", "textile", "software", "mining", "publishing", "brewing", "aerospace",
    "pharmaceutical", "railway", "insurance", "glassmaking", "fishing", "robotics", "clockmaking",
)  # fmt: skip
HOBBIES = (
    "chess", "rowing", "falconry", "beekeeping", "archery", "fencing", "origami", "birdwatching",
    "kite flying", "calligraphy", "gardening", "sailing", "pottery", "knitting", "climbing",
)  # fmt: skip
INSTRUMENTS = (
    "cello", "harp", "oboe", "lute", "accordion", "bassoon", "sitar", "banjo", "marimba",
    "zither", "trombone", "flute",
)  # fmt: skip
PETS = (
    "parrot", "tortoise", "ferret", "goat", "greyhound", "cat", "hedgehog", "canary", "rabbit",
    "llama", "dachshund", "tarantula",
)  # fmt: skip
ORG_SUFFIXES = ("Dynamics", "Works", "Holdings", "Labs", "Foundry", "Systems", "Trading", "Guild")

FILLER_SENTENCES = (
    "{s} is mentioned in several regional chronicles.",
    "Records about {s} were compiled by local historians.",
    "Little else is documented about {s} in public archives.",
    "Visitors often ask about {s} when touring the region.",
    "A short biography of {s} appeared in a yearly almanac.",
    "Scholars continue to debate minor details concerning {s}.",
    "Several newspapers have published features on {s}.",
    "An exhibition once presented documents related to {s}.",
)

# Background sentences that pad passages to a realistic length (``SyntheticKB(passage_words=...)``,
# e.g. ~100 words like the DPR Wikipedia passages MEM1 retrieves). They name the entity but state
# no fact, and avoid every word of the relations' sentences and search keywords, so padding never
# changes an answer or what a keyword search finds. A prime count, so a stride walk visits them all.
BACKGROUND_SENTENCES = (
    "An illustrated guide to the area devotes a short chapter to {s}.",
    "Several letters that mention {s} are kept in a private collection.",
    "Local newspapers printed a long profile of {s} during one busy summer.",
    "Accounts of {s} differ in small details from one source to another.",
    "A documentary team once spent two weeks gathering material about {s}.",
    "Students sometimes write essays about {s} as part of their coursework.",
    "The name {s} appears in an old travel diary kept by a merchant.",
    "Photographs related to {s} were shown at a small gallery one spring.",
    "Some readers first learned about {s} from a popular radio programme.",
    "An encyclopedia entry on {s} was revised after new sources came to light.",
    "Critics praised the careful research in a recent book about {s}.",
    "A walking tour mentions {s} at one of its stops near the old market.",
    "Archivists catalogued a box of papers concerning {s} last decade.",
    "Many anecdotes about {s} circulate among residents of the region.",
    "A museum label briefly describes {s} next to a display of maps.",
    "Researchers have compared {s} with similar cases from other regions.",
    "The story of {s} was retold in a magazine series about forgotten lives.",
    "A commemorative plaque refers to {s} near the entrance of the library.",
    "Several conferences have included talks touching on {s}.",
    "An online forum hosts a long discussion thread about {s}.",
    "Teachers occasionally use {s} as an example in geography lessons.",
    "Translations of articles about {s} exist in three languages.",
    "A collector owns several postcards showing scenes linked to {s}.",
    "Tour guides tell a colourful legend involving {s} to visitors.",
    "A local society meets each autumn to share new findings about {s}.",
    "Old maps of the district include a small note referring to {s}.",
    "A radio drama loosely inspired by {s} was broadcast one winter.",
    "The earliest printed reference to {s} is a brief notice in a gazette.",
    "Visitors leave comments about {s} in a guestbook at the town hall.",
)

ENTITY_TYPES = ("person", "city", "org", "country")


@dataclass(frozen=True)
class Relation:
    """One fact type: who it is about, how passages state it and how a question asks it."""

    name: str
    """Identifier, e.g. ``person_born_in``."""
    subject: str
    """Entity type it is about (one of ``ENTITY_TYPES``)."""
    target: str
    """Entity type of the value, or ``value`` for a plain attribute."""
    slot: int
    """Which passage of the subject states it."""
    sentences: tuple[str, ...]
    """Sentence variants with ``{s}`` (subject name) and ``{o}`` (value)."""
    question: str
    """Single-hop question with ``{s}``."""
    keywords: str
    """Words a searcher adds to the subject's name to find the fact."""


RELATIONS: dict[str, Relation] = {
    r.name: r
    for r in (
        Relation("person_born_year", "person", "value", 0,
                 ("{s} was born in the year {o}.", "The birth year of {s} is {o}."),
                 "In what year was {s} born?", "born year"),
        Relation("person_born_in", "person", "city", 0,
                 ("{s} was born in the city of {o}.", "The birthplace of {s} is {o}."),
                 "In which city was {s} born?", "born city birthplace"),
        Relation("person_occupation", "person", "value", 1,
                 ("The profession of {s} is {o}.", "{s} trained and worked as {o}."),
                 "What is the profession of {s}?", "profession worked"),
        Relation("person_employer", "person", "org", 1,
                 ("{s} is employed by {o}.", "{s} works for {o}."),
                 "Which organization employs {s}?", "employed works for"),
        Relation("person_hobby", "person", "value", 2,
                 ("In spare time, {s} enjoys {o}.", "A favourite pastime of {s} is {o}."),
                 "Which pastime does {s} enjoy?", "pastime enjoys"),
        Relation("person_instrument", "person", "value", 3,
                 ("{s} plays the {o}.", "{s} has played the {o} since childhood."),
                 "Which musical instrument does {s} play?", "plays instrument"),
        Relation("person_pet", "person", "value", 4,
                 ("{s} keeps a {o} as a pet.", "At home {s} looks after a pet {o}."),
                 "What kind of animal does {s} keep as a pet?", "pet keeps"),
        Relation("city_country", "city", "country", 0,
                 ("{s} is a city in {o}.", "{s} lies in the country of {o}."),
                 "In which country is the city of {s}?", "city country"),
        Relation("city_population", "city", "value", 0,
                 ("{s} has a population of {o}.", "The number of inhabitants of {s} is {o}."),
                 "What is the population of {s}?", "population inhabitants"),
        Relation("city_founded", "city", "value", 0,
                 ("{s} was founded in {o}.", "The settlement of {s} dates from {o}."),
                 "In what year was the city of {s} founded?", "founded settlement"),
        Relation("org_founded", "org", "value", 0,
                 ("{s} was established in {o}.", "{s} has existed since {o}."),
                 "In what year was {s} established?", "established existed since"),
        Relation("org_founder", "org", "person", 0,
                 ("{s} was founded by {o}.", "The founder of {s} is {o}."),
                 "Who founded {s}?", "founded by founder"),
        Relation("org_hq", "org", "city", 1,
                 ("{s} is headquartered in {o}.", "The head office of {s} is in {o}."),
                 "In which city is {s} headquartered?", "headquartered head office"),
        Relation("org_industry", "org", "value", 1,
                 ("{s} operates in the {o} industry.", "{s} is a company in the {o} sector."),
                 "In which industry does {s} operate?", "industry sector"),
        Relation("country_capital", "country", "city", 0,
                 ("The capital of {s} is {o}.", "{o} is the capital city of {s}."),
                 "What is the capital of {s}?", "capital"),
        Relation("country_currency", "country", "value", 0,
                 ("The currency of {s} is the {o}.", "People in {s} pay with the {o}."),
                 "What is the currency of {s}?", "currency"),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Chain:
    """A two-hop question: follow ``first`` to an entity, then ask ``second`` about it."""

    name: str
    first: str
    second: str
    question: str


CHAINS: dict[str, Chain] = {
    c.name: c
    for c in (
        Chain("born_country", "person_born_in", "city_country", "In which country was {s} born?"),
        Chain("birthplace_founded", "person_born_in", "city_founded",
              "In what year was the birthplace of {s} founded?"),
        Chain("employer_founded", "person_employer", "org_founded",
              "In what year was the employer of {s} established?"),
        Chain("employer_founder", "person_employer", "org_founder",
              "Who founded the organization that employs {s}?"),
        Chain("employer_hq", "person_employer", "org_hq",
              "In which city is the employer of {s} headquartered?"),
        Chain("founder_born_year", "org_founder", "person_born_year",
              "In what year was the founder of {s} born?"),
        Chain("founder_born_in", "org_founder", "person_born_in",
              "In which city was the founder of {s} born?"),
        Chain("hq_country", "org_hq", "city_country", "In which country is {s} headquartered?"),
        Chain("capital_population", "country_capital", "city_population",
              "What is the population of the capital of {s}?"),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Question:
    """One question with its exact answer."""

    question: str
    """The question text."""
    answers: tuple[str, ...]
    """Accepted answers (canonical first, then aliases)."""
    hops: int
    """1 (one fact) or 2 (a relation, then a fact)."""
    template: str
    """Name of the relation or chain that produced it."""


def parse_question(question: str) -> tuple[list[str], str] | None:
    """Inverts the question templates: the relation names to follow and the subject's name.

    Returns ``None`` for a question no template produced. Longer templates are tried first, so
    "the founder of X" is never taken for a subject.
    """
    for pattern, relations in _QUESTION_PATTERNS:
        match = pattern.fullmatch(question.strip())
        if match:
            return list(relations), match.group("s")
    return None


def _question_regex(template: str) -> re.Pattern[str]:
    return re.compile(re.escape(template).replace(re.escape("{s}"), "(?P<s>.+)"))


_QUESTION_PATTERNS = sorted(
    [(_question_regex(r.question), (r.name,)) for r in RELATIONS.values()]
    + [(_question_regex(c.question), (c.first, c.second)) for c in CHAINS.values()],
    key=lambda item: -len(item[0].pattern),
)


def extract_fact(relation: str, subject: str, text: str) -> str | None:
    """Reads the value of ``relation`` for ``subject`` from passage text, or None if absent."""
    for pattern in _fact_patterns(relation, subject):
        match = pattern.search(text)
        if match:
            return match.group("o").strip()
    return None


@functools.lru_cache(maxsize=4096)
def _fact_patterns(relation: str, subject: str) -> list[re.Pattern[str]]:
    patterns = []
    for sentence in RELATIONS[relation].sentences:
        body = re.escape(sentence)
        body = body.replace(re.escape("{s}"), re.escape(subject), 1)
        body = body.replace(re.escape("{o}"), r"(?P<o>[^.]+?)", 1)
        patterns.append(re.compile(r"(?:^|(?<=\s))" + body))
    return patterns
