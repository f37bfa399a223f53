"""ObjNav-lite (``memrl/ObjNav-v0``): a CPU-fast navigation task with ExtObjNav's shape.

``ObjNavEnv`` is the gymnasium env (one trial = one env episode), ``ObjNavVec`` the batched numpy
core it wraps, ``ObjNavVectorEnv`` the native gymnasium VectorEnv, ``ObjNavConfig`` their
configuration; ``memrl.envs.objnav.render`` draws frames and writes PNGs and GIFs. See
docs/objnav.md.
"""

from memrl.envs.objnav.config import ObjNavConfig
from memrl.envs.objnav.core import ACTION_NAMES, NUM_ACTIONS, ObjNavVec, StepResult
from memrl.envs.objnav.env import ObjNavEnv
from memrl.envs.objnav.vector import ObjNavVectorEnv

__all__ = [
    "ACTION_NAMES",
    "NUM_ACTIONS",
    "ObjNavConfig",
    "ObjNavEnv",
    "ObjNavVec",
    "ObjNavVectorEnv",
    "StepResult",
]
