"""The retrieval service as a Ray Serve application: the ASGI app of ``memrl serve retrieval``.

On a cluster, one replica or several behind Ray Serve's HTTP proxy:

    serve run memrl.envs.retrieval.serve_app:app_builder synthetic_passages=100000
    serve run memrl.envs.retrieval.serve_app:app_builder corpus=/data/wiki18.parquet \\
        index=/data/wiki18-bm25 num_replicas=2

or from Python: ``serve.run(app_builder({"synthetic_passages": 300}), route_prefix="/")``. Clients
(``DocQAEnv(retriever="http")``, any Search-R1 client) then POST to ``http://HEAD:8000/retrieve``
and get the very bytes the single-machine server sends (one ``RetrievalApp`` for both). Each
replica builds or opens its index once, in its constructor.

Arguments (strings, as ``serve run`` passes them): the service spec of ``service.py``
(``synthetic_passages`` and ``seed``, or ``corpus`` with ``index`` and ``index_kind``), and
``num_replicas`` and ``num_cpus`` (per replica, default 1).
"""

from __future__ import annotations

from typing import Any

from ray import serve

from memrl.envs.retrieval.app import RetrievalApp
from memrl.envs.retrieval.service import SPEC_KEYS, build_retriever

DEPLOYMENT_KEYS = ("num_replicas", "num_cpus")
_INT_KEYS = ("synthetic_passages", "seed", "num_replicas")


@serve.deployment(name="memrl_retrieval")
@serve.ingress()
class RetrievalDeployment:
    """One replica: a retriever built from a spec, served by ``RetrievalApp``."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self._retriever = build_retriever(spec)
        self._num_docs = len(self._retriever.corpus)

    def __serve_build_asgi_app__(self) -> RetrievalApp:
        return RetrievalApp(self._retriever, self._num_docs)


def app_builder(args: dict[str, Any]):
    """The Serve application for ``serve run ...:app_builder key=value ...``.

    Raises:
        ValueError: an unknown key or a value of the wrong type (the message names it).
    """
    unknown = sorted(set(args) - set(SPEC_KEYS) - set(DEPLOYMENT_KEYS))
    if unknown:
        raise ValueError(
            f"Unknown argument(s) {unknown}. Allowed: {list(SPEC_KEYS) + list(DEPLOYMENT_KEYS)}."
        )
    values = dict(args)
    for key in _INT_KEYS:
        if key in values:
            values[key] = _number(key, values[key], int)
    num_cpus = _number("num_cpus", values.pop("num_cpus", 1), float)
    num_replicas = values.pop("num_replicas", 1)
    deployment = RetrievalDeployment.options(
        num_replicas=num_replicas, ray_actor_options={"num_cpus": num_cpus}
    )
    return deployment.bind(values)


def _number(key: str, value: Any, kind: type) -> Any:
    try:
        if isinstance(value, bool) or (kind is int and isinstance(value, float)):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        what = "an int" if kind is int else "a number"
        raise ValueError(f"{key} must be {what}, got {value!r}.") from None
