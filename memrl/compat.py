"""Old module paths of memrl 0.1, kept importable so that runs written by it keep loading.

RLlib checkpoints pickle classes and factories by their module path (the RLModule class, the
learner class, connector factories, callbacks). Those paths moved when the package took its
one-room-per-method layout; ``install()`` (called when ``memrl`` is imported) lets Python resolve
each old path to the module that now holds the same objects. Nothing new should import these.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

MOVED: dict[str, str] = {
    "memrl.callbacks": "memrl.experiment.callbacks",
    "memrl.config": "memrl.experiment.config",
    "memrl.evaluate": "memrl.experiment.evaluate",
    "memrl.ray_session": "memrl.experiment.ray_session",
    "memrl.settings": "memrl.experiment.dataclass_dicts",
    "memrl.train": "memrl.experiment.train",
    "memrl.tune": "memrl.experiment.tune",
    "memrl.models.builtin": "memrl.methods.baselines",
    "memrl.learners.ppo": "memrl.methods.ppo",
    "memrl.models.memo": "memrl.methods.memo.network",
    "memrl.models.frozen_encoder": "memrl.methods.memo.frozen_encoder",
    "memrl.models.memo_rlmodule": "memrl.methods.memo.rlmodule",
    "memrl.runners.memo_cache": "memrl.methods.memo.cache_keeper",
    "memrl.runners.memo_connectors": "memrl.methods.memo.connectors",
    "memrl.learners.memo_batch": "memrl.methods.memo.batch",
    "memrl.learners.memo_ppo": "memrl.methods.memo.learner",
    "memrl.models.prompts": "memrl.methods.mem1.prompts",
    "memrl.models.context": "memrl.methods.mem1.context",
    "memrl.models.llm_net": "memrl.methods.mem1.network",
    "memrl.models.tokenizer": "memrl.methods.mem1.tiny",
    "memrl.models.llm_rlmodule": "memrl.methods.mem1.rlmodule",
    "memrl.models.llm": "memrl.methods.mem1.settings",
    "memrl.learners.mem1": "memrl.methods.mem1.settings",
    "memrl.learners.token_algorithm": "memrl.methods.mem1.algorithm",
    "memrl.learners.token_learner": "memrl.methods.mem1.learner",
    "memrl.learners.token_batch": "memrl.methods.mem1.batch",
    "memrl.runners.text_env_runner": "memrl.methods.mem1.env_runner",
    "memrl.runners.text_rollout": "memrl.methods.mem1.rollout",
}
"""Old module path -> the module that holds its objects now."""

OLD_PACKAGES = ("memrl.models", "memrl.learners", "memrl.runners")
"""Packages that no longer exist; importing them gives empty packages (their old submodules
resolve through MOVED)."""


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str | None) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self.target is None:
            package = types.ModuleType(spec.name, "Old memrl package (see memrl.compat).")
            package.__path__ = []
            return package
        return importlib.import_module(self.target)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module is the new one, already imported."""


class _OldPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname in MOVED:
            return importlib.machinery.ModuleSpec(fullname, _Alias(MOVED[fullname]))
        if fullname in OLD_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, _Alias(None), is_package=True)
        return None


def install() -> None:
    """Lets the old module paths of MOVED import (idempotent)."""
    if not any(isinstance(f, _OldPathFinder) for f in sys.meta_path):
        sys.meta_path.append(_OldPathFinder())
