"""Reads every module's imports (ast) and lists the ones that break memrl's layering rules.

The rules (docs: memrl/methods/__init__.py, memrl/experiment/__init__.py) keep the import graph
running one way: CLI -> experiment / command groups -> methods -> envs, with ``memrl.metrics`` a
leaf everyone may use. Every import counts, including the lazy ones inside functions.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

METHOD_ROLES: dict[str, str] = {
    "memo/layers.py": "network",
    "memo/cache.py": "network",
    "memo/network.py": "network",
    "memo/stepping.py": "network",
    "memo/frozen_encoder.py": "network",
    "memo/value_head.py": "network",
    "memo/columns.py": "shared",
    "memo/rlmodule.py": "module",
    "memo/cache_keeper.py": "runner",
    "memo/connectors.py": "runner",
    "memo/bulk_runner.py": "runner",
    "memo/bulk_learner.py": "learner",
    "memo/batch.py": "learner",
    "memo/learner.py": "learner",
    "memo/settings.py": "settings",
    "mem1/prompts.py": "shared",
    "mem1/context.py": "shared",
    "mem1/network.py": "network",
    "mem1/tiny.py": "network",
    "mem1/pretrained.py": "network",
    "mem1/generation/__init__.py": "network",
    "mem1/generation/base.py": "network",
    "mem1/generation/hf.py": "network",
    "mem1/generation/openai.py": "network",
    "mem1/generation/vllm.py": "network",
    "mem1/rlmodule.py": "module",
    "mem1/rollout.py": "runner",
    "mem1/env_runner.py": "runner",
    "mem1/warm_start.py": "runner",
    "mem1/batch.py": "learner",
    "mem1/advantages.py": "learner",
    "mem1/losses.py": "learner",
    "mem1/learner.py": "learner",
    "mem1/algorithm.py": "settings",
    "mem1/selection.py": "settings",
    "mem1/settings.py": "settings",
    "baselines.py": "settings",
    "ppo.py": "settings",
    "ppo_math.py": "leaf",
}
"""File under memrl/methods/ -> its role. Package __init__ files hold only docstrings. A "leaf"
sits directly under memrl/methods and belongs to no method: every method may import it (one
formula, one owner), and it imports no memrl code, so no method reaches another through it."""

COMMAND_GROUPS = ("memrl.cli", "memrl.bench", "memrl.serve", "memrl.data", "memrl.__main__")

REASONS = {
    "network-ray": "a network is plain torch so it runs (and is benchmarked) where Ray is absent",
    "method-method": "methods are independent rooms: share code through envs or memrl.metrics",
    "envs-up": "envs are the bottom layer: a method or experiment may use them, never the reverse",
    "cli-down": "the CLI and command groups sit on top; code below them must not depend on them",
    "learner-runner": "learner and env-runner pieces meet only in the method's settings",
    "module-learner": "an RLModule is built on env runners too; it must not pull in its learner",
    "method-experiment": "experiment code calls a method's settings, never the reverse",
    "experiment-method": "experiment code reaches methods only through the config registries",
    "metrics-leaf": "memrl.metrics is a leaf shared by all layers, so it imports no memrl code",
    "methods-leaf": "a leaf of memrl/methods is shared by all methods, so it imports no memrl code",
    "unclassified": "every file under memrl/methods needs a role in METHOD_ROLES",
}


@dataclass(frozen=True)
class Violation:
    rule: str
    file: str
    line: int
    imported: str

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line} imports {self.imported} [{self.rule}: {REASONS[self.rule]}]"
        )


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(root: Path, path: Path) -> list[tuple[str, int]]:
    """(absolute module name, line) of every import in a file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(root, path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((name, node.lineno))
            # `from memrl.methods import memo` imports the submodule memo.
            found += [(f"{name}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _method_of(name: str) -> str | None:
    """memrl.methods.memo.x -> 'memo'; memrl.methods.ppo -> 'ppo'; else None."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[:2] == ["memrl", "methods"]:
        return parts[2]
    return None


def _role(root: Path, name: str) -> str | None:
    parts = name.split(".")
    if parts[:2] != ["memrl", "methods"] or len(parts) < 3:
        return None
    for end in range(len(parts), 2, -1):  # memrl.methods.x.f: the name f of module x
        rel = "/".join(parts[2:end])
        role = METHOD_ROLES.get(rel + ".py") or METHOD_ROLES.get(rel + "/__init__.py")
        if role is not None:
            return role
    return None


def violations(root: Path) -> list[Violation]:
    """Every import under ``root`` (the memrl package folder) that breaks a rule."""
    out: dict[tuple[str, str, int], Violation] = {}  # one per rule and import statement
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        me = module_name(root, path)
        in_methods = _under(me, "memrl.methods") and me != "memrl.methods"
        my_method = _method_of(me)
        my_role = _role(root, me) if in_methods else None
        if in_methods and my_role is None and path.name != "__init__.py":
            out["unclassified", rel, 1] = Violation("unclassified", rel, 1, "-")
        for name, line in imports_of(root, path):

            def add(rule: str, rel: str = rel, name: str = name, line: int = line) -> None:
                out.setdefault((rule, rel, line), Violation(rule, rel, line, name))

            if my_role == "network" and _under(name, "ray"):
                add("network-ray")
            if me == "memrl.metrics" and _under(name, "memrl"):
                add("metrics-leaf")
            if my_role == "leaf" and _under(name, "memrl"):
                add("methods-leaf")
            if not _under(name, "memrl"):
                continue
            below_cli = _under(me, "memrl.methods") or _under(me, "memrl.envs")
            below_cli |= _under(me, "memrl.experiment") or me == "memrl.metrics"
            if below_cli and any(_under(name, g) for g in COMMAND_GROUPS):
                add("cli-down")
            if _under(me, "memrl.envs") and (
                _under(name, "memrl.methods") or _under(name, "memrl.experiment")
            ):
                add("envs-up")
            if _under(me, "memrl.experiment") and _under(name, "memrl.methods"):
                add("experiment-method")
            if not in_methods:
                continue
            if _under(name, "memrl.experiment"):
                add("method-experiment")
            other = _method_of(name)
            their_role = _role(root, name)
            shared_leaf = their_role == "leaf" or my_role == "leaf"
            if other is not None and my_method is not None and other != my_method:
                if not shared_leaf:
                    add("method-method")
            if other == my_method and their_role is not None:
                if {my_role, their_role} == {"learner", "runner"}:
                    add("learner-runner")
                if my_role == "module" and their_role == "learner":
                    add("module-learner")
    return list(out.values())


def import_graph(root: Path) -> dict[str, set[str]]:
    """memrl module -> the memrl modules it imports. ``from memrl.x import y`` imports the module
    ``memrl.x.y`` when there is one (the package ``memrl.x`` is only passed through, as for any
    submodule), else the name ``y`` of ``memrl.x``."""
    files = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for me, path in files.items():
        targets = set()
        found = imports_of(root, path)
        submodules = {name for name, _ in found if name in files}
        for name, line in found:
            if any(sub.startswith(name + ".") and (sub, line) in found for sub in submodules):
                continue  # ``from name import submodule``: the submodule is the import
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != me:
                targets.add(name)
        graph[me] = targets
    return graph


def cycles(root: Path) -> list[list[str]]:
    """Every group of memrl modules that import each other round in a circle (the strongly
    connected components of the import graph with more than one module), each sorted."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)
