"""One WebShop world shared by every env runner of a Ray cluster, through a named actor.

``RemoteWorld.connect(spec, name)`` gets (or creates) the named (non-detached) actor ``name`` that
holds the world of ``spec`` and returns a client with ``WebShopWorld``'s methods. Searches go to
the actor; products are fetched once per client and cached (a page shows at most 10), and goals are
fetched in one call. N runners thus hold one catalogue and one index between them.
"""

from __future__ import annotations

import logging
from typing import Any

from memrl.envs.webshop.goals import split_indices
from memrl.envs.webshop.world import CatalogueSpec, get_world

logger = logging.getLogger(__name__)


class WebShopService:
    """The actor body: a world built from a spec, answering searches and lookups."""

    def __init__(self, spec: CatalogueSpec) -> None:
        self.spec = spec
        self.world = get_world(spec)

    def spec_of(self) -> CatalogueSpec:
        return self.spec

    def search(self, query: str, k: int = 50) -> list[str]:
        return self.world.search(query, k)

    def products(self, asins: list[str]) -> list[dict[str, Any]]:
        return [self.world.product(a) for a in asins]

    def prices(self, asins: list[str]) -> list[float]:
        return [self.world.price(a) for a in asins]

    def goals(self) -> list[dict[str, Any]]:
        return self.world.goals


class RemoteWorld:
    """Client of a ``WebShopService`` actor with the methods the engine and env use."""

    def __init__(self, actor: Any, spec: CatalogueSpec) -> None:
        import ray

        self._ray = ray
        self.actor = actor
        self.spec = spec
        self.goals = ray.get(actor.goals.remote())
        self._products: dict[str, dict[str, Any]] = {}
        self._prices: dict[str, float] = {}

    @classmethod
    def connect(cls, spec: CatalogueSpec, name: str = "memrl_webshop") -> RemoteWorld:
        """Gets or creates the named service actor for ``spec`` (needs ``ray.init`` first).

        Raises:
            ValueError: an actor of that name serves a different catalogue.
        """
        import ray

        if not ray.is_initialized():
            raise ValueError(
                "backend='ray' needs a running Ray (call ray.init() or run inside "
                "RLlib); use backend='local' otherwise."
            )
        actor = (
            ray.remote(WebShopService)
            .options(name=name, get_if_exists=True, num_cpus=0, lifetime=None)
            .remote(spec)
        )
        served = ray.get(actor.spec_of.remote())
        if served != spec:
            raise ValueError(
                f"Ray actor {name!r} serves {served}, not {spec}. Use another "
                "service_name for a different catalogue."
            )
        return cls(actor, spec)

    def search(self, query: str, k: int = 50) -> list[str]:
        asins = self._ray.get(self.actor.search.remote(query, k))
        missing = [a for a in asins[:10] if a not in self._products]
        if missing:
            self._fetch(missing)
        return asins

    def _fetch(self, asins: list[str]) -> None:
        products, prices = self._ray.get(
            [self.actor.products.remote(asins), self.actor.prices.remote(asins)]
        )
        if len(self._products) > 50_000:
            self._products.clear()
            self._prices.clear()
        self._products.update(zip(asins, products, strict=True))
        self._prices.update(zip(asins, prices, strict=True))

    def product(self, asin: str) -> dict[str, Any]:
        if asin not in self._products:
            self._fetch([asin])
        return self._products[asin]

    def price(self, asin: str) -> float:
        if asin not in self._prices:
            self._fetch([asin])
        return self._prices[asin]

    def num_goals(self) -> int:
        return len(self.goals)

    def goal(self, index: int) -> dict[str, Any]:
        return self.goals[index]

    def split(self, name: str) -> range:
        return split_indices(len(self.goals), name)
