"""ObjNav-lite (``memrl/ObjNav-v0``): a CPU-fast navigation task with ExtObjNav's shape.

``ObjNavEnv`` is the gymnasium env (one trial = one env episode), ``ObjNavVec`` the batched numpy
core it wraps, ``ObjNavConfig`` their configuration; ``memrl.envs.objnav.render`` draws frames and
writes PNGs and GIFs. See docs/objnav.md.
"""

from memrl.envs.objnav.config import ObjNavConfig
from memrl.envs.objnav.core import ACTION_NAMES, NUM_ACTIONS, ObjNavVec, StepResult
from memrl.envs.objnav.env import ObjNavEnv

__all__ = ["ACTION_NAMES", "NUM_ACTIONS", "ObjNavConfig", "ObjNavEnv", "ObjNavVec", "StepResult"]
