"""One retrieval index per Ray cluster, shared by every env runner: a named Ray actor.

``start_retrieval_service(spec)`` creates (or finds) the actor named ``name``; it builds or opens
the index once. Env runners anywhere in the cluster reach it by name through ``RayRetriever``,
so N runners share one copy of the index instead of holding N. A named actor was chosen over a
Ray Serve deployment for env runners: it needs no HTTP proxy or controller, and its call overhead
is lower. The HTTP protocol is served separately, by ``memrl serve retrieval`` on one machine or
by the Ray Serve application of ``serve_app.py`` on a cluster.

Spec keys: ``synthetic_passages`` and ``seed`` (the synthetic KB), or ``corpus`` with an optional
``index`` folder and ``index_kind``.
"""

from __future__ import annotations

import logging
from typing import Any

from memrl.envs.retrieval.base import Hit, check_topk

logger = logging.getLogger(__name__)

DEFAULT_NAME = "memrl_retrieval"
"""Actor name used when none is given (``DocQAEnv(ray_service=...)`` defaults to it)."""
SPEC_KEYS = ("synthetic_passages", "seed", "corpus", "index", "index_kind")


def build_retriever(spec: dict[str, Any]):
    """Builds a ``LocalRetriever`` from a service spec (see the module docstring)."""
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"Unknown retrieval spec key(s) {unknown}. Allowed: {list(SPEC_KEYS)}.")
    from memrl.envs.doc_qa import resources

    if spec.get("corpus"):
        return resources.local_retriever(
            spec["corpus"], spec.get("index"), spec.get("index_kind", "bm25")
        )
    if spec.get("synthetic_passages"):
        return resources.synthetic_retriever(int(spec["synthetic_passages"]), spec.get("seed", 0))
    raise ValueError(
        "A retrieval spec needs 'corpus' (a corpus file) or 'synthetic_passages' (a KB size), "
        f"got {spec!r}."
    )


class RetrievalActor:
    """The actor behind the service: one retriever, called concurrently by many runners."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self._retriever = build_retriever(spec)
        self._num_docs = len(self._retriever.corpus)

    def ready(self) -> int:
        """Number of passages served (also a liveness probe)."""
        return self._num_docs

    def retrieve(self, queries: list[str], topk: int) -> list[list[Hit]]:
        return self._retriever.retrieve(queries, topk)


def start_retrieval_service(
    spec: dict[str, Any],
    name: str = DEFAULT_NAME,
    namespace: str | None = None,
    num_cpus: float = 1,
    max_concurrency: int = 8,
    detached: bool = False,
):
    """Creates the named retrieval actor, or returns the one already running under that name.

    Args:
        spec: what to serve (see the module docstring).
        name: the actor's name in the cluster.
        namespace: Ray namespace (``None``: the job's); detached services need one.
        num_cpus: CPUs reserved for the actor.
        max_concurrency: calls served at once (threads; numpy scoring releases the GIL).
        detached: outlive the driver that started it (``memrl serve retrieval --ray``).

    Returns:
        The actor handle, after the index is built.
    """
    import ray

    if not ray.is_initialized():
        raise RuntimeError("start_retrieval_service needs Ray: call ray.init() first.")
    options: dict[str, Any] = {
        "name": name,
        "get_if_exists": True,
        "num_cpus": num_cpus,
        "max_concurrency": max_concurrency,
    }
    if namespace is not None:
        options["namespace"] = namespace
    if detached:
        options["lifetime"] = "detached"
    handle = ray.remote(RetrievalActor).options(**options).remote(spec)
    num_docs = ray.get(handle.ready.remote())
    logger.info("retrieval service %r serves %d passages", name, num_docs)
    return handle


class RayRetriever:
    """Client of the named retrieval actor (looked up lazily, so it pickles cheaply).

    Args:
        name: the service's actor name.
        namespace: its Ray namespace (``None``: the caller's).
    """

    def __init__(self, name: str = DEFAULT_NAME, namespace: str | None = None) -> None:
        self.name = name
        self.namespace = namespace
        self._handle = None

    def __getstate__(self) -> dict:
        return {"name": self.name, "namespace": self.namespace, "_handle": None}

    def _actor(self):
        if self._handle is None:
            import ray

            try:
                self._handle = ray.get_actor(self.name, namespace=self.namespace)
            except ValueError:
                raise ValueError(
                    f"No Ray retrieval service named {self.name!r} is running. Start it with "
                    "memrl.envs.retrieval.service.start_retrieval_service(spec, name=...) in the "
                    "driver before the env runners, or use retriever='local'."
                ) from None
        return self._handle

    def retrieve(self, queries: list[str], topk: int) -> list[list[Hit]]:
        """For each query, up to ``topk`` hits, best first."""
        import ray

        check_topk(topk)
        return ray.get(self._actor().retrieve.remote(list(queries), topk))
