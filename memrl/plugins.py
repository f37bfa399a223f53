"""Discovery of the CLI's pluggable command groups (`memrl bench|serve|data NAME`).

Each command is one module in its group's package (``memrl/bench``, ``memrl/serve``,
``memrl/data``); the module name with ``_`` turned into ``-`` is the command name, and modules
starting with ``_`` are private. A command module has:

- a docstring whose first line is the one-line help;
- ``add_arguments(parser: argparse.ArgumentParser) -> None``;
- ``run(args: argparse.Namespace) -> int`` (the exit code).

Modules import heavy dependencies inside ``run`` so that ``--help`` stays fast.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

GROUPS: dict[str, str] = {
    "bench": "memrl.bench",
    "serve": "memrl.serve",
    "data": "memrl.data",
}


def command_names(group: str) -> list[str]:
    """Names of the commands a group has, sorted."""
    package = importlib.import_module(GROUPS[group])
    return sorted(
        info.name.replace("_", "-")
        for info in pkgutil.iter_modules(package.__path__)
        if not info.name.startswith("_")
    )


def load_command(group: str, name: str) -> ModuleType:
    """Imports the module behind ``memrl GROUP NAME``.

    Raises:
        ValueError: the group has no such command (the message lists those it has).
    """
    names = command_names(group)
    if name not in names:
        raise ValueError(
            f"Unknown {group} command {name!r}. Available: {names or '(none yet)'}. "
            f"See `memrl {group} --help`."
        )
    module = importlib.import_module(f"{GROUPS[group]}.{name.replace('-', '_')}")
    for attr in ("add_arguments", "run"):
        if not callable(getattr(module, attr, None)):
            raise TypeError(f"{module.__name__} is not a command module: it lacks {attr}()")
    return module


def one_line_help(module: ModuleType) -> str:
    doc = (module.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""
