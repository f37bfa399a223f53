"""WebShop (Yao et al. 2022) re-implemented: same schema, page flow and reward, no Java or spaCy.

See docs/webshop.md. ``WebShopEnv`` is registered as ``memrl/WebShop-v0``.
"""

from memrl.envs.webshop.catalogue import Catalogue, load_catalogue
from memrl.envs.webshop.engine import Session, WebShopEngine
from memrl.envs.webshop.env import WebShopEnv
from memrl.envs.webshop.reward import get_reward, get_reward_verbose
from memrl.envs.webshop.shopper import ScriptedShopper, evaluate_shopper
from memrl.envs.webshop.world import CatalogueSpec, WebShopWorld, get_world

__all__ = [
    "Catalogue",
    "CatalogueSpec",
    "ScriptedShopper",
    "Session",
    "WebShopEngine",
    "WebShopEnv",
    "WebShopWorld",
    "evaluate_shopper",
    "get_reward",
    "get_reward_verbose",
    "get_world",
    "load_catalogue",
]
