"""memrl's import graph runs one way (see tests/import_rules.py for the rules and their reasons)."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_rules import METHOD_ROLES, REASONS, cycles, violations
from memrl_testing import REPO

PACKAGE = REPO / "memrl"


def test_memrl_follows_the_import_rules() -> None:
    found = violations(PACKAGE)
    assert not found, "import rules broken:\n" + "\n".join(map(str, found))


def test_no_import_cycle() -> None:
    found = cycles(PACKAGE)
    assert not found, "modules that import each other in a circle (lazy imports count):\n" + (
        "\n".join(" <-> ".join(group) for group in found)
    )


def test_every_method_file_has_a_role_and_every_role_a_file() -> None:
    on_disk = {
        p.relative_to(PACKAGE / "methods").as_posix()
        for p in (PACKAGE / "methods").rglob("*.py")
        if p.name != "__init__.py" or p.parent.name == "generation"
    }
    assert set(METHOD_ROLES) == on_disk


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "memrl"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        (folder / "__init__.py").touch()
    return root


CASES = {
    "network-ray": {"methods/memo/network.py": "import ray\n"},
    "method-method": {"methods/memo/settings.py": "from memrl.methods.mem1 import context\n"},
    "envs-up": {"envs/key_door.py": "def f():\n    from memrl.methods.memo import rlmodule\n"},
    "cli-down": {"methods/mem1/rollout.py": "from memrl.cli import main\n"},
    "learner-runner": {"methods/memo/batch.py": "from .connectors import MemoTrialStep\n"},
    "module-learner": {"methods/memo/rlmodule.py": "from memrl.methods.memo.learner import L\n"},
    "method-experiment": {"methods/memo/settings.py": "import memrl.experiment.config\n"},
    "experiment-method": {"experiment/train.py": "from memrl.methods.memo import settings\n"},
    "metrics-leaf": {"metrics.py": "from memrl.envs import make_env\n"},
    "methods-leaf": {"methods/ppo_math.py": "from memrl.methods.memo import learner\n"},
    "unclassified": {"methods/memo/helpers.py": "x = 1\n"},
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_rule_catches_its_violation(tmp_path: Path, rule: str) -> None:
    root = _tree(tmp_path, CASES[rule])
    found = violations(root)
    assert [v.rule for v in found] == [rule], found
    assert REASONS[rule] in str(found[0])


def test_allowed_imports_pass(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "methods/memo/settings.py": "from .learner import L\nfrom .connectors import C\n",
            "methods/memo/rlmodule.py": "from .cache_keeper import K\nimport ray\n",
            "methods/mem1/rollout.py": "from memrl.envs.text import Tags\nimport memrl.metrics\n",
            "experiment/config.py": "REG = {'memo': 'memrl.methods.memo.settings:S'}\n",
            "bench/memo_memory.py": "from memrl.methods.memo.network import MemoTransformer\n",
            "methods/memo/learner.py": "from memrl.methods.ppo_math import masked_mean\n",
            "methods/mem1/losses.py": "from memrl.methods import ppo_math\n",
        },
    )
    assert violations(root) == []


def test_cycle_check_finds_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "envs/a.py": "from memrl.envs.b import g\n",
            "envs/b.py": "def g():\n    from memrl.envs import a\n",
            "envs/c.py": "from memrl.envs import a, b\n",
            "envs/pkg/__init__.py": "from memrl.envs.pkg.d import D\n",
            "envs/pkg/d.py": "from memrl.envs.pkg import e\n",
            "envs/pkg/e.py": "E = 1\n",
        },
    )
    # c imports both but neither imports c; d imports its sibling e, not the package.
    assert cycles(root) == [["memrl.envs.a", "memrl.envs.b"]]
