"""Bulk rollouts: env steps kept as flat (T, N) arrays from the vector env to the PPO loss.

RLlib's env runner turns every env step into per-env episode objects and its learner connectors
turn them back into a batch. For envs with a native vector form (``memrl.envs.VECTOR_ENTRY_POINTS``)
this package skips both: ``BulkEnvRunner`` (env_runner.py) steps the vector env and writes a whole
rollout into preallocated arrays (``Rollout``, arrays.py); ``BulkPPOLearner`` (learner.py) computes
values in one forward pass, GAE over the arrays (gae.py) and cuts minibatches from them. RLlib's
metrics, fault tolerance, weight sync and checkpoints stay as they are (the runner and learner are
subclasses of RLlib's own). ``use_bulk`` (select.py) says where the path applies; a model's
settings wire it in.

Imports: envs, torch and Ray; never ``memrl.methods`` or ``memrl.experiment`` (methods use it).
"""
