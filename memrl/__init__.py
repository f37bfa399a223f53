"""memrl: training memory-efficient agents (Memo, MEM1) with Ray RLlib's new API stack.

Importing the package registers its gymnasium environments under the ``memrl/`` namespace; every
heavy dependency (Ray, torch, transformers, selenium) is imported lazily, where it is needed.
"""

from memrl import compat as _compat
from memrl import envs as _envs  # noqa: F401  (registers memrl/* env ids)

_compat.install()  # old module paths of 0.1 checkpoints (see memrl.compat)

__version__ = "0.1.0"
