"""The synthetic knowledge base: exact size, determinism, answerable questions, splits."""

from __future__ import annotations

import numpy as np
import pytest

from memrl.envs.doc_qa.synthetic import (
    CHAINS,
    RELATIONS,
    SyntheticKB,
    extract_fact,
    parse_question,
)


@pytest.mark.parametrize("size", [55, 56, 109, 110, 300, 1234])
def test_corpus_has_exactly_the_requested_passages(size):
    corpus = SyntheticKB(size, seed=3).corpus
    assert len(corpus) == size
    ids = corpus.table.column("id").to_pylist()
    assert len(set(ids)) == size


def test_same_seed_same_world_other_seed_other_world():
    a = SyntheticKB(300, seed=1).corpus.table
    b = SyntheticKB(300, seed=1).corpus.table
    c = SyntheticKB(300, seed=2).corpus.table
    assert a.equals(b)
    assert not a.equals(c)


def test_size_limits_are_explained():
    with pytest.raises(ValueError, match="55 to"):
        SyntheticKB(54)
    with pytest.raises(TypeError):
        SyntheticKB(300.0)


def test_every_question_is_stated_by_the_passages_it_needs():
    kb = SyntheticKB(300, seed=0)
    passages = {}
    for _pid, title, text in kb.passages():
        passages.setdefault(title, []).append(text)
    rng = np.random.default_rng(0)
    checked = {1: 0, 2: 0}
    for question in kb.sample_questions(150, rng, "train", multi_hop_fraction=0.5):
        relations, subject = parse_question(question.question)
        assert question.template in RELATIONS or question.template in CHAINS
        assert len(relations) == question.hops
        for relation in relations:  # follow the chain through the passages, as a reader would
            values = {extract_fact(relation, subject, t) for t in passages[subject]} - {None}
            assert len(values) == 1, (question, relation, subject)
            subject = values.pop()
        assert subject == question.answers[0]
        checked[question.hops] += 1
    assert checked[1] > 20 and checked[2] > 20


def test_aliases_per_answer_type():
    kb = SyntheticKB(300, seed=0)
    person_answer = kb.question("org_founder", 0).answers
    first, last = person_answer[0].split(" ", 1)
    assert person_answer == (person_answer[0], f"{first[0]}. {last}")
    country = kb.question("city_country", 0).answers
    assert country[1] == f"Republic of {country[0]}"
    assert kb.question("person_born_year", 0).answers[0].isdigit()


def test_train_and_test_questions_are_disjoint_and_deterministic():
    kb = SyntheticKB(1000, seed=0)
    train = kb.sample_questions(300, np.random.default_rng(1), "train")
    test = kb.sample_questions(100, np.random.default_rng(1), "test")
    assert not {q.question for q in train} & {q.question for q in test}
    again = kb.sample_questions(300, np.random.default_rng(1), "train")
    assert [q.question for q in again] == [q.question for q in train]


def test_parse_question_prefers_the_longer_template():
    assert parse_question("In what year was the founder of Abc Labs born?") == (
        ["org_founder", "person_born_year"],
        "Abc Labs",
    )
    assert parse_question("In what year was Ann Bo born?") == (["person_born_year"], "Ann Bo")
    assert parse_question("Who wrote Hamlet?") is None


def test_scales_to_large_corpora_quickly():
    kb = SyntheticKB(100_000, seed=0)
    corpus = kb.corpus
    assert len(corpus) == 100_000
    assert corpus[99_999].title  # the last passage is a country, rendered like the rest


def test_padded_passages_have_the_requested_length_and_the_same_facts():
    short = SyntheticKB(110, seed=4)
    long = SyntheticKB(110, seed=4, passage_words=100)
    pairs = list(zip(short.passages(), long.passages(), strict=True))
    for (pid_a, title_a, text_a), (pid_b, title_b, text_b) in pairs:
        assert (pid_a, title_a) == (pid_b, title_b)
        assert len(text_b.split()) == 100
        assert text_b.startswith(text_a.split(". ")[0])  # the facts come first, uncut
    # Every question reads the same answer from the padded passages as from the short ones.
    by_title = {}
    for _pid, title, text in long.passages():
        by_title.setdefault(title, []).append(text)
    rng = np.random.default_rng(1)
    questions = long.sample_questions(60, rng, "train", multi_hop_fraction=0.5)
    assert questions == short.sample_questions(
        60, np.random.default_rng(1), "train", multi_hop_fraction=0.5
    )
    for question in questions:
        relations, subject = parse_question(question.question)
        for relation in relations:
            values = {extract_fact(relation, subject, t) for t in by_title[subject]} - {None}
            assert len(values) == 1, (question, relation)
            subject = values.pop()
        assert subject == question.answers[0]
    # Deterministic, and the default stays the short corpus.
    again = SyntheticKB(110, seed=4, passage_words=100).corpus.table
    assert again.equals(long.corpus.table)
    assert SyntheticKB(110, seed=4, passage_words=0).corpus.table.equals(short.corpus.table)


def test_passage_words_limits_are_explained():
    with pytest.raises(ValueError, match="passage_words must be 0"):
        SyntheticKB(55, passage_words=-1)
    with pytest.raises(TypeError, match="passage_words"):
        SyntheticKB(55, passage_words=100.0)
    # A length shorter than the facts keeps the passage whole.
    kb = SyntheticKB(55, passage_words=5)
    assert [t for _, _, t in kb.passages()] == [t for _, _, t in SyntheticKB(55).passages()]
