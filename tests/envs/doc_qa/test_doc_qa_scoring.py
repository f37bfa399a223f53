"""score(): SQuAD normalization, per-position EM and token F1, summed over objectives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memrl.envs.doc_qa import score
from memrl.envs.doc_qa.scoring import normalize_answer, token_f1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a   quick,  brown fox. ", "quick brown fox"),
        ("An apple; the pear", "apple pear"),
        ("theatre", "theatre"),  # an article only as a whole word
        ("ÉCOLE Normale", "école normale"),
        ("", ""),
    ],
)
def test_normalize_answer_follows_squad(text, expected):
    assert normalize_answer(text) == expected


def test_score_sums_exact_match_by_position():
    targets = [["Paris", "City of Paris"], ["1889"], ["Gustave Eiffel"]]
    assert score("paris; 1889; Eiffel", targets) == {"em": 2.0, "f1": pytest.approx(2 + 2 / 3)}
    assert score("The City of Paris;1889 ;gustave eiffel.", targets)["em"] == 3.0
    # Position matters: the right answers in the wrong order score nothing.
    assert score("1889; Paris; Gustave Eiffel", targets)["em"] == 1.0


def test_wrong_number_of_parts_scores_zero():
    targets = [["Paris"], ["1889"]]
    assert score("Paris", targets) == {"em": 0.0, "f1": 0.0}
    assert score("Paris; 1889; extra", targets) == {"em": 0.0, "f1": 0.0}
    assert score("", targets) == {"em": 0.0, "f1": 0.0}


def test_token_f1_is_bag_of_tokens_max_over_aliases():
    # pred "cat sat on mat" vs gold "the cat sat": common = {cat, sat} -> P=2/4, R=2/2 -> 2/3.
    assert token_f1("cat sat on mat", ["the cat sat"]) == pytest.approx(2 / 3)
    assert token_f1("cat cat", ["cat"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert token_f1("new york", ["York City", "New York"]) == 1.0
    assert token_f1("boston", ["new york"]) == 0.0


def test_bad_argument_types_raise_type_error():
    with pytest.raises(TypeError, match="alias lists"):
        score("Paris", ["Paris"])
    with pytest.raises(TypeError, match="str"):
        score(None, [["Paris"]])


_answer = st.text(alphabet=st.characters(blacklist_characters=";"), min_size=1, max_size=30)


@given(st.lists(st.lists(_answer, min_size=1, max_size=3), min_size=1, max_size=6), st.text())
def test_score_bounds_and_gold_answers_score_full(targets, prediction):
    n = len(targets)
    result = score(prediction, targets)
    assert 0.0 <= result["em"] <= result["f1"] + 1e-9 <= n + 1e-9
    gold = score("; ".join(aliases[0] for aliases in targets), targets)
    assert gold["em"] == n
    assert gold["f1"] == pytest.approx(n)
