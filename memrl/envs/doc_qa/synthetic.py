"""A synthetic knowledge base: invented entities and facts, rendered into passages, with questions.

The offline default corpus of doc-QA. Everything is a deterministic function of
``(num_passages, seed)``: no download, and the answer of every question is known exactly.

The world has four entity types: people, cities, organizations and countries, with attributes
(years, populations, professions, ...) and relations (a person was born in a city and works for
an organization; an organization was founded by a person and sits in a city; a city lies in a
country, whose capital is one of its cities). Each entity is rendered into one or more passages
titled with its name. Questions ask one fact (single-hop) or follow a relation first and then ask
a fact of the entity found (two-hop, e.g. "In which country was X born?").

Scale: entities come in groups of 1 country, 4 cities, 5 organizations and 20 people (55 passages);
the remainder up to ``num_passages`` are extra passages about people (pastime, instrument, pet), so
the corpus has exactly ``num_passages`` rows for any size from 55 up to millions.

Length: by default a passage is its facts plus one filler sentence (~24 words, ~45 tokens).
``passage_words=100`` pads every passage with background sentences about its entity (seeded, no
facts in them) and cuts it at exactly 100 words, like the 100-word Wikipedia passages (DPR
wiki-2018) that MEM1 retrieves top-3 of; facts always come first and are never cut.
"""

from __future__ import annotations

import copy
import zlib
from functools import cached_property

import numpy as np

from memrl.envs.doc_qa.kb_schema import (
    BACKGROUND_SENTENCES,
    CHAINS,
    ENTITY_TYPES,
    FILLER_SENTENCES,
    HOBBIES,
    INDUSTRIES,
    INSTRUMENTS,
    OCCUPATIONS,
    ORG_SUFFIXES,
    PETS,
    RELATIONS,
    SYLLABLES,
    Question,
    extract_fact,
    parse_question,
)
from memrl.envs.retrieval.corpus import SCHEMA, Corpus

MIN_PASSAGES = 55
"""Smallest corpus: one group of entities."""
MAX_PASSAGES = 20_000_000
"""Largest corpus (the name pools run out beyond it)."""

MAX_PASSAGE_WORDS = 1000
"""Longest padded passage (``passage_words``)."""

GROUP_PASSAGES = 55
PEOPLE_PER_GROUP, ORGS_PER_GROUP, CITIES_PER_GROUP = 20, 5, 4


def _word(index: int) -> str:
    """The index-th invented word (2 or 3 syllables), capitalized."""
    n = len(SYLLABLES)
    if index < n * n:
        a, b = divmod(index, n)
        return (SYLLABLES[a] + SYLLABLES[b]).capitalize()
    index -= n * n
    a, rest = divmod(index, n * n)
    b, c = divmod(rest, n)
    return (SYLLABLES[a] + SYLLABLES[b] + SYLLABLES[c]).capitalize()


class SyntheticKB:
    """The invented world for a corpus of ``num_passages`` passages.

    Args:
        num_passages: exact number of passages (``MIN_PASSAGES`` to ``MAX_PASSAGES``).
        seed: world seed; the same (num_passages, seed) gives the same world on any machine.
        passage_words: 0 (default) for short passages (facts + one filler sentence); N > 0 pads
            each passage with background sentences about its entity to exactly N words (a passage
            whose facts alone are longer is kept whole). The facts, questions and answers do not
            depend on it.
    """

    def __init__(self, num_passages: int, seed: int = 0, passage_words: int = 0) -> None:
        if isinstance(num_passages, bool) or not isinstance(num_passages, int):
            raise TypeError(f"num_passages must be an int, got {num_passages!r}")
        if not MIN_PASSAGES <= num_passages <= MAX_PASSAGES:
            raise ValueError(
                f"A synthetic KB has {MIN_PASSAGES} to {MAX_PASSAGES} passages, got "
                f"{num_passages}; pick a size in that range."
            )
        if isinstance(passage_words, bool) or not isinstance(passage_words, int):
            raise TypeError(f"passage_words must be an int, got {passage_words!r}")
        if not 0 <= passage_words <= MAX_PASSAGE_WORDS:
            raise ValueError(
                f"passage_words must be 0 (short passages) or a word count up to "
                f"{MAX_PASSAGE_WORDS}, got {passage_words}; 100 matches Wikipedia passages."
            )
        self.num_passages = num_passages
        self.seed = seed
        self.passage_words = passage_words
        rng = np.random.default_rng([seed, num_passages])
        groups = num_passages // GROUP_PASSAGES
        self.counts = {
            "person": PEOPLE_PER_GROUP * groups,
            "city": CITIES_PER_GROUP * groups,
            "org": ORGS_PER_GROUP * groups,
            "country": groups,
        }
        npeople, ncities, norgs, ncountries = (self.counts[t] for t in ENTITY_TYPES)
        self._names = self._draw_names(rng)

        self.facts = self._draw_facts(rng)
        self.facts_seed: int | None = None
        """None for the world's own facts; else the seed they were redrawn with (``with_facts``)."""
        # Extra passages about people fill the corpus up to exactly num_passages.
        extra = num_passages - groups * GROUP_PASSAGES
        self._extra_slots = np.zeros(npeople, dtype=np.int64)  # extra passages per person
        full, rest = divmod(extra, npeople)
        self._extra_slots[:] = full
        self._extra_slots[:rest] += 1
        self._variants = rng.integers(0, 2, (len(RELATIONS), max(npeople, ncities, norgs)))
        self._fillers = rng.integers(0, len(FILLER_SENTENCES), num_passages)
        if passage_words:
            # Own generator, so the world (and the short passages) do not depend on the option.
            # Passage i walks the background sentences from start[i] with stride[i]; the count is
            # prime, so any stride in 1..count-1 visits every sentence once before repeating.
            pad_rng = np.random.default_rng([seed, num_passages, 1])
            count = len(BACKGROUND_SENTENCES)
            self._pad_start = pad_rng.integers(0, count, num_passages)
            self._pad_stride = pad_rng.integers(1, count, num_passages)

    def with_facts(self, facts_seed: int) -> SyntheticKB:
        """The same world (names, passage wording, sizes) with every fact redrawn from
        ``facts_seed``: a population, founder or birthplace differs, a name does not.

        Tasks drawn over such copies (one per task) can only be answered by reading retrieved
        passages: no value can be remembered from another task. Cheap (a few arrays); the copy's
        corpus is rendered on first use.
        """
        if isinstance(facts_seed, bool) or not isinstance(facts_seed, int) or facts_seed < 0:
            raise ValueError(f"facts_seed must be an int >= 0, got {facts_seed!r}")
        twin = copy.copy(self)
        twin.__dict__.pop("corpus", None)  # the cached_property of the original world
        twin.facts = self._draw_facts(
            np.random.default_rng([self.seed, self.num_passages, 2, facts_seed])
        )
        twin.facts_seed = facts_seed
        return twin

    def _draw_facts(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Every fact of the world: one integer array per relation, indexed by subject (values
        index a vocabulary or another entity type; years and populations are the values)."""
        npeople, ncities, norgs, ncountries = (self.counts[t] for t in ENTITY_TYPES)
        city_country = np.concatenate(
            [np.arange(ncountries), rng.integers(0, ncountries, ncities - ncountries)]
        )
        rng.shuffle(city_country)
        # Each country's capital is its first city, so every country has one.
        capital = np.full(ncountries, -1)
        for city, country in enumerate(city_country):
            if capital[country] < 0:
                capital[country] = city
        return {
            "person_born_year": rng.integers(1820, 1991, npeople),
            "person_born_in": rng.integers(0, ncities, npeople),
            "person_occupation": rng.integers(0, len(OCCUPATIONS), npeople),
            "person_employer": rng.integers(0, norgs, npeople),
            "person_hobby": rng.integers(0, len(HOBBIES), npeople),
            "person_instrument": rng.integers(0, len(INSTRUMENTS), npeople),
            "person_pet": rng.integers(0, len(PETS), npeople),
            "city_country": city_country,
            "city_population": rng.integers(20, 50_000, ncities) * 100,
            "city_founded": rng.integers(800, 1800, ncities),
            "org_founded": rng.integers(1850, 2021, norgs),
            "org_founder": rng.integers(0, npeople, norgs),
            "org_hq": rng.integers(0, ncities, norgs),
            "org_industry": rng.integers(0, len(INDUSTRIES), norgs),
            "country_capital": capital,
            "country_currency": rng.integers(0, len(self._names["currency"]), ncountries),
        }

    def _draw_names(self, rng: np.random.Generator) -> dict[str, list[str]]:
        npeople, ncities, norgs, ncountries = (self.counts[t] for t in ENTITY_TYPES)
        n_first, n_last = 2000, 5000
        universe = len(SYLLABLES) ** 2 + len(SYLLABLES) ** 3
        sizes = [n_first, n_last, ncities, norgs, ncountries, 200]
        order = rng.choice(universe, size=sum(sizes), replace=False).tolist()
        pools, start = [], 0
        for size in sizes:
            pools.append(order[start : start + size])
            start += size
        first, last, cities, stems, countries, currency = pools
        cities, stems, countries, currency = (
            [_word(i) for i in pool] for pool in (cities, stems, countries, currency)
        )
        codes = rng.choice(n_first * n_last, size=npeople, replace=False)
        # Only the first and last names that people use are spelled out (a small world draws 20
        # people from 2000 x 5000 combinations).
        people = [f"{_word(first[c // n_last])} {_word(last[c % n_last])}" for c in codes.tolist()]
        suffixes = rng.integers(0, len(ORG_SUFFIXES), norgs)
        orgs = [f"{s} {ORG_SUFFIXES[k]}" for s, k in zip(stems, suffixes.tolist(), strict=True)]
        return {
            "person": people,
            "city": cities,
            "org": orgs,
            "country": countries,
            "currency": currency,
        }

    # -- facts -------------------------------------------------------------------------------

    def name(self, entity_type: str, index: int) -> str:
        """Canonical name of an entity."""
        return self._names[entity_type][index]

    def value(self, relation: str, subject: int) -> tuple[str, int | None]:
        """The rendered value of a fact and, when it is an entity, that entity's index."""
        rel = RELATIONS[relation]
        raw = int(self.facts[relation][subject])
        if rel.target != "value":
            return self.name(rel.target, raw), raw
        vocab = {
            "person_occupation": OCCUPATIONS,
            "person_hobby": HOBBIES,
            "person_instrument": INSTRUMENTS,
            "person_pet": PETS,
            "org_industry": INDUSTRIES,
            "country_currency": self._names["currency"],
        }.get(relation)
        return (vocab[raw] if vocab is not None else str(raw)), None

    def aliases(self, relation: str, subject: int) -> tuple[str, ...]:
        """Accepted answers for a fact: the canonical value first, then its aliases."""
        value, entity = self.value(relation, subject)
        target = RELATIONS[relation].target
        if target == "person":
            first, last = value.split(" ", 1)
            return (value, f"{first[0]}. {last}")
        if target == "city":
            return (value, f"{value} City")
        if target == "country":
            return (value, f"Republic of {value}")
        if target == "org":
            return (value, value.rsplit(" ", 1)[0])
        if relation == "org_industry":
            return (value, f"{value} industry")
        return (value,)

    def has_fact(self, relation: str, subject: int) -> bool:
        """Whether a passage states this fact (extra person facts exist only in some passages)."""
        rel = RELATIONS[relation]
        if rel.subject == "person" and rel.slot >= 2:
            return bool(self._extra_slots[subject] >= rel.slot - 1)
        return True

    # -- questions ---------------------------------------------------------------------------

    def question(self, template: str, subject: int) -> Question | None:
        """The question of a relation or chain about one subject (None if it has no answer)."""
        if template in RELATIONS:
            rel = RELATIONS[template]
            if not self.has_fact(template, subject):
                return None
            text = rel.question.format(s=self.name(rel.subject, subject))
            return Question(text, self.aliases(template, subject), 1, template)
        chain = CHAINS[template]
        first = RELATIONS[chain.first]
        _, middle = self.value(chain.first, subject)
        if middle is None or not self.has_fact(chain.second, middle):
            return None
        text = chain.question.format(s=self.name(first.subject, subject))
        return Question(text, self.aliases(chain.second, middle), 2, template)

    def in_split(self, template: str, subject: int, split: str, test_fraction: float) -> bool:
        """Deterministic train/test assignment of each (template, subject) question."""
        code = zlib.crc32(f"{self.seed}:{template}:{subject}".encode()) % 10_000
        is_test = code < test_fraction * 10_000
        return is_test if split == "test" else not is_test

    def sample_questions(
        self,
        n: int,
        rng: np.random.Generator,
        split: str = "train",
        test_fraction: float = 0.2,
        multi_hop_fraction: float = 0.5,
    ) -> list[Question]:
        """Draws ``n`` distinct questions of one split.

        Args:
            n: how many questions.
            rng: the generator to draw with (seed it per task for reproducible tasks).
            split: ``train`` or ``test``; the two never share a question.
            test_fraction: share of all (template, subject) questions that belong to ``test``.
            multi_hop_fraction: probability that a question is two-hop.
        """
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        single, multi = list(RELATIONS), list(CHAINS)
        out: list[Question] = []
        seen: set[str] = set()
        for _ in range(1000 * max(1, n)):
            if len(out) == n:
                break
            names = multi if rng.random() < multi_hop_fraction else single
            template = names[int(rng.integers(len(names)))]
            subject_type = (
                RELATIONS[template].subject
                if template in RELATIONS
                else RELATIONS[CHAINS[template].first].subject
            )
            subject = int(rng.integers(self.counts[subject_type]))
            if not self.in_split(template, subject, split, test_fraction):
                continue
            q = self.question(template, subject)
            if q is None or q.question in seen:
                continue
            seen.add(q.question)
            out.append(q)
        if len(out) < n:
            raise ValueError(
                f"Could draw only {len(out)} of {n} distinct {split} questions from a KB of "
                f"{self.num_passages} passages; use a larger KB or fewer objectives."
            )
        return out

    # -- passages ----------------------------------------------------------------------------

    def _sentence(self, relation: str, subject: int) -> str:
        rel = RELATIONS[relation]
        variant = int(self._variants[_REL_INDEX[relation], subject])
        value, _ = self.value(relation, subject)
        return rel.sentences[variant].format(s=self.name(rel.subject, subject), o=value)

    def _pad(self, text: str, name: str, index: int) -> str:
        """``text`` padded with background sentences about ``name`` to ``passage_words`` words."""
        words = text.split()
        target = self.passage_words
        if len(words) >= target:
            return text
        count = len(BACKGROUND_SENTENCES)
        start, stride = int(self._pad_start[index]), int(self._pad_stride[index])
        k = 0
        while len(words) < target:
            words += BACKGROUND_SENTENCES[(start + k * stride) % count].format(s=name).split()
            k += 1
        return " ".join(words[:target])

    def passages(self):
        """Yields ``(id, title, text)`` for every passage, in corpus order."""
        filler = iter(self._fillers.tolist())
        index = 0
        by_slot: dict[tuple[str, int], list[str]] = {}
        for rel in RELATIONS.values():
            by_slot.setdefault((rel.subject, rel.slot), []).append(rel.name)
        for entity_type in ENTITY_TYPES:
            slots = sorted(slot for (t, slot) in by_slot if t == entity_type)
            for subject in range(self.counts[entity_type]):
                name = self.name(entity_type, subject)
                for slot in slots:
                    if entity_type == "person" and slot >= 2:
                        if self._extra_slots[subject] < slot - 1:
                            break
                    facts = " ".join(
                        self._sentence(r, subject) for r in by_slot[(entity_type, slot)]
                    )
                    text = f"{facts} {FILLER_SENTENCES[next(filler)].format(s=name)}"
                    if self.passage_words:
                        text = self._pad(text, name, index)
                    index += 1
                    yield f"{entity_type}{subject}-{slot}", name, text

    @cached_property
    def corpus(self) -> Corpus:
        """All passages as a ``Corpus`` (built once per KB object)."""
        import pyarrow as pa

        ids, titles, texts = [], [], []
        for pid, title, text in self.passages():
            ids.append(pid)
            titles.append(title)
            texts.append(text)
        assert len(ids) == self.num_passages, (len(ids), self.num_passages)
        return Corpus(pa.table({"id": ids, "title": titles, "text": texts}, schema=SCHEMA))


_REL_INDEX = {name: i for i, name in enumerate(RELATIONS)}

__all__ = [
    "CHAINS",
    "RELATIONS",
    "Question",
    "SyntheticKB",
    "extract_fact",
    "parse_question",
]
