"""Multi-objective document-retrieval QA (``memrl/DocQA-v0``) and its scoring."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memrl.envs.doc_qa.scoring import normalize_answer, score

if TYPE_CHECKING:
    from memrl.envs.doc_qa.env import DocQAEnv

__all__ = ["DocQAEnv", "normalize_answer", "score"]


def __getattr__(name: str) -> Any:
    # The env pulls in the index and the synthetic KB; importing ``score`` alone stays light.
    if name == "DocQAEnv":
        from memrl.envs.doc_qa.env import DocQAEnv

        return DocQAEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
