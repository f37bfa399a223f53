"""A WebShop world: catalogue + search index + goals, built once per process and shared.

Every env, engine and server of a process that asks ``get_world(spec)`` for the same
``CatalogueSpec`` gets the same object, so N envs hold one catalogue and one index. Across
processes (RLlib env runners), ``memrl.envs.webshop.service`` serves one world from a named Ray
actor; ``RemoteWorld`` there has the same methods as ``WebShopWorld``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from memrl.envs.webshop.catalogue import Catalogue, catalogue_from_records, load_catalogue
from memrl.envs.webshop.goals import make_goals, split_indices
from memrl.envs.webshop.search import SEARCH_RETURN_N, SearchIndex

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CatalogueSpec:
    """Which catalogue and goals a world holds."""

    data_dir: str | None = None
    """Folder of items_shuffle*.json etc.; None builds a synthetic catalogue in memory."""
    num_products: int | None = 1000
    """Synthetic: the catalogue size. Real files: keep the first N products (None = all)."""
    seed: int = 0
    """Seed of the synthetic catalogue, of prices inside ranges and of price bounds."""
    human_goals: bool = True
    """Goals from human instructions (the benchmark) or synthetic (every option combination)."""

    def __post_init__(self) -> None:
        if self.data_dir is None and self.num_products is None:
            raise ValueError(
                "A synthetic WebShop catalogue needs num_products (got None); set "
                "num_products between 100 and 1000000, or give data_dir."
            )


class WebShopWorld:
    """Catalogue, BM25 index and shuffled goals; read-only after construction (thread-safe)."""

    def __init__(self, spec: CatalogueSpec, catalogue: Catalogue | None = None) -> None:
        self.spec = spec
        t0 = time.perf_counter()
        self.catalogue = catalogue if catalogue is not None else build_catalogue(spec)
        t1 = time.perf_counter()
        self.index = SearchIndex(self.catalogue.documents())
        t2 = time.perf_counter()
        self.goals = make_goals(self.catalogue, human=spec.human_goals, seed=spec.seed)
        self.timings = {"load_s": t1 - t0, "index_s": t2 - t1, "goals_s": time.perf_counter() - t2}
        if not self.goals:
            raise ValueError(
                f"The WebShop catalogue {self.catalogue.source!r} yields no "
                f"{'human' if spec.human_goals else 'synthetic'} goals: it lacks "
                f"{'items_human_ins.json' if spec.human_goals else 'items_ins_v2 instructions'}."
                " Add that file or switch human_goals."
            )

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """asins of the top-k products for a query, best first."""
        products = self.catalogue.products
        return [products[i]["asin"] for i in self.index.search(query, k)]

    def product(self, asin: str) -> dict[str, Any]:
        return self.catalogue.product(asin)

    def price(self, asin: str) -> float:
        return self.catalogue.prices[asin]

    def num_goals(self) -> int:
        return len(self.goals)

    def goal(self, index: int) -> dict[str, Any]:
        return self.goals[index]

    def split(self, name: str) -> range:
        """Goal indices of a split (``test``, ``eval``, ``train``, ``all``)."""
        return split_indices(len(self.goals), name)


def build_catalogue(spec: CatalogueSpec) -> Catalogue:
    """Loads the real/synthetic files of ``spec.data_dir`` or generates the catalogue in memory."""
    if spec.data_dir is not None:
        return load_catalogue(spec.data_dir, num_products=spec.num_products, price_seed=spec.seed)
    from memrl.envs.webshop.generator import iter_catalogue

    raw, attributes, human = [], {}, {}
    for record, ins_v2, instructions in iter_catalogue(spec.num_products, spec.seed):
        raw.append(record)
        attributes[record["asin"]] = ins_v2
        if instructions:
            human[record["asin"]] = instructions
    return catalogue_from_records(
        raw,
        attributes,
        human,
        price_seed=spec.seed,
        source=f"synthetic(num_products={spec.num_products}, seed={spec.seed})",
    )


_WORLDS: dict[CatalogueSpec, WebShopWorld] = {}
_LOCK = threading.Lock()


def get_world(spec: CatalogueSpec) -> WebShopWorld:
    """The process-wide world of a spec, built on first use."""
    with _LOCK:
        world = _WORLDS.get(spec)
        if world is None:
            logger.info("Building WebShop world %s", asdict(spec))
            world = _WORLDS[spec] = WebShopWorld(spec)
        return world


def register_world(world: WebShopWorld) -> None:
    """Makes ``world`` the process-wide world of its spec (e.g. one built from a catalogue)."""
    with _LOCK:
        _WORLDS[world.spec] = world
