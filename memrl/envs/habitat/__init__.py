"""Envs in a worker process under another Python: habitat-lab (ExtObjNav) and ObjNav-lite.

``HabitatEnv`` (``memrl/Habitat-v0``) is the gymnasium side; ``worker.py`` the script the other
interpreter runs; ``wire.py`` their protocol. Importing this package never imports habitat.
See docs/habitat.md.
"""

from memrl.envs.habitat.client import WorkerCrashedError, WorkerError
from memrl.envs.habitat.env import PYTHON_ENV_VAR, HabitatEnv, resolve_python
from memrl.envs.habitat.wire import PROTOCOL_VERSION

__all__ = [
    "PROTOCOL_VERSION",
    "PYTHON_ENV_VAR",
    "HabitatEnv",
    "WorkerCrashedError",
    "WorkerError",
    "resolve_python",
]
