"""``scripts/mutate.py`` (``make mutate``) without running it: every breakage of its catalogue
still matches one line of the code it breaks, and changes it, so a refactor of the core math
cannot leave the catalogue silently breaking nothing."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest
from memrl_testing import REPO

spec = importlib.util.spec_from_file_location("mutate_script", REPO / "scripts" / "mutate.py")
mutate = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mutate  # dataclasses look their module up there
spec.loader.exec_module(mutate)


@pytest.mark.parametrize("breakage", mutate.CATALOGUE, ids=lambda b: b.name)
def test_each_breakage_matches_the_code_and_changes_it(tmp_path, breakage):
    target = tmp_path / breakage.path
    target.parent.mkdir(parents=True)
    shutil.copy(REPO / breakage.path, target)
    correct = mutate.apply(tmp_path, breakage)
    broken = target.read_text()
    assert broken != correct and breakage.broken in broken
    assert len(broken.splitlines()) == len(correct.splitlines())  # one line changed
    for tests in breakage.tests:
        assert (REPO / tests).exists()


def test_names_are_unique_and_the_seven_gaps_are_in_the_catalogue():
    names = [b.name for b in mutate.CATALOGUE]
    assert len(names) == len(set(names))
    assert {
        "mem1-packed-exact-scratch",
        "mem1-reference-is-policy",
        "mem1-ddp-scale",
        "memo-targets-not-normalized",
        "memo-kl-sign",
        "memo-advantages-over-padding",
        "memo-segment-view-offset",
    } <= set(names)
