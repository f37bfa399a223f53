"""HabitatEnv: a gymnasium env whose simulator runs in a worker process under another Python.

habitat-sim is conda-only and habitat-lab pins gym<0.23.1 and numpy 1.26.4, so they live in their
own Python environment; this env starts ``worker.py`` under that interpreter and talks to it over
a socketpair with the protocol in ``wire.py``. memrl itself never imports habitat.

Backends: ``habitat`` (habitat-lab's gym env with an ExtObjNav task, ``habitat_task.py``) and
``objnav`` (ObjNav-lite, which runs under memrl's own venv; CI tests the adapter through it).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from memrl.envs.habitat import wire
from memrl.envs.habitat.client import WorkerCrashedError, WorkerProcess

logger = logging.getLogger(__name__)

PYTHON_ENV_VAR = "MEMRL_HABITAT_PYTHON"
BACKENDS = ("habitat", "objnav")


def resolve_python(backend: str, python: str | None) -> str:
    """The interpreter that runs the worker.

    ``python`` wins; else the ``habitat`` backend reads ``MEMRL_HABITAT_PYTHON`` and the ``objnav``
    backend uses this interpreter (ObjNav-lite needs memrl's venv, not habitat's).

    Raises:
        ValueError: no interpreter for the habitat backend.
        FileNotFoundError: the interpreter does not exist or is not executable.
    """
    source = "env.config.python"
    if not python and backend == "habitat":
        python, source = os.environ.get(PYTHON_ENV_VAR), PYTHON_ENV_VAR
        if not python:
            raise ValueError(
                "HabitatEnv needs the Python interpreter of a habitat environment: set "
                f"{PYTHON_ENV_VAR}=/path/to/envs/habitat/bin/python or env.config.python "
                "(see docs/habitat.md for the conda recipe)."
            )
    if not python:
        return sys.executable
    found = shutil.which(python) if os.sep not in python else python
    if not found or not os.access(found, os.X_OK) or Path(found).is_dir():
        raise FileNotFoundError(
            f"the worker interpreter {python!r} (from {source}) does not exist or is not "
            f"executable; point {source} at an existing python (e.g. the habitat conda env's "
            "bin/python)"
        )
    return found


def build_space(desc: dict[str, Any]) -> gym.Space:
    """The gymnasium space of a ``wire.describe_space`` description."""
    kind = desc["type"]
    if kind == "Discrete":
        return gym.spaces.Discrete(desc["n"])
    if kind == "Box":
        shape, dtype = tuple(desc["shape"]), np.dtype(desc["dtype"])
        low, high = (
            np.broadcast_to(np.asarray(desc[k], dtype=dtype), shape) for k in ("low", "high")
        )
        return gym.spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
    if kind == "Dict":
        return gym.spaces.Dict({k: build_space(v) for k, v in desc["spaces"].items()})
    raise ValueError(f"unknown space type {kind!r} from the worker")


class HabitatEnv(gym.Env):
    """A worker-process env: ``memrl/Habitat-v0``.

    Args:
        backend: ``"habitat"`` (habitat-lab, ExtObjNav task) or ``"objnav"`` (ObjNav-lite).
        python: the worker's interpreter (default: ``MEMRL_HABITAT_PYTHON`` for habitat, this
            interpreter for objnav).
        task: keyword arguments of the backend env (``habitat_task.ExtObjNavTask`` or
            ``ObjNavEnv``).
        render_mode: ``None`` or ``"rgb_array"``.
        start_timeout_s: limit for starting a worker (habitat loads scenes: minutes).
        step_timeout_s: limit for one reset/step/render.
        max_restarts: consecutive worker starts a ``reset()`` may try after crashes.

    A crash of the worker (it died, broke the protocol, or hung past the timeout) raises
    ``WorkerCrashedError`` from the call that saw it, with the exit status and the tail of the
    worker's log; the next ``reset()`` starts a fresh worker (RLlib: set
    ``restart_failed_sub_environments=True`` to have env runners do so by themselves).
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        backend: str = "habitat",
        python: str | None = None,
        task: dict[str, Any] | None = None,
        render_mode: str | None = None,
        start_timeout_s: float = 600.0,
        step_timeout_s: float = 120.0,
        max_restarts: int = 3,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"HabitatEnv backend must be one of {list(BACKENDS)}, got {backend!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if task is not None and not isinstance(task, dict):
            raise TypeError(f"HabitatEnv task must be a dict of backend options, got {task!r}")
        if not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
        self.backend = backend
        self.python = resolve_python(backend, python)
        self.task = dict(task or {})
        self.render_mode = render_mode
        self.start_timeout_s = start_timeout_s
        self.step_timeout_s = step_timeout_s
        self.max_restarts = max_restarts
        self.restarts = 0
        """Workers started after the first (crashes recovered)."""
        self._worker: WorkerProcess | None = None
        self._needs_reset = True
        self._start_worker()
        spaces = self._worker.spaces
        self.observation_space = build_space(spaces["observation_space"])
        self.action_space = build_space(spaces["action_space"])

    @property
    def worker_pid(self) -> int | None:
        """Process id of the running worker (None when none runs)."""
        return self._worker.pid if self._worker is not None and self._worker.alive() else None

    def _start_worker(self) -> None:
        self._worker = WorkerProcess(
            self.python,
            self.backend,
            self.task,
            self.render_mode,
            self.start_timeout_s,
            self.step_timeout_s,
        )

    def _drop_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Starts a new trial; starts a new worker first if the last one crashed."""
        super().reset(seed=seed)
        failures = 0
        while True:
            try:
                if self._worker is None or not self._worker.alive():
                    self._drop_worker()
                    self._start_worker()
                    self.restarts += 1
                    logger.warning(
                        "restarted the %s env worker (pid %d, restart %d)",
                        self.backend,
                        self._worker.pid,
                        self.restarts,
                    )
                reply, arrays = self._worker.call({"op": "reset", "seed": seed, "options": options})
                break
            except WorkerCrashedError:
                self._drop_worker()
                failures += 1
                if failures > self.max_restarts:
                    raise
                logger.warning(
                    "env worker crashed during reset (%d of %d tries)",
                    failures,
                    self.max_restarts + 1,
                )
        self._needs_reset = False
        info = dict(reply.get("info") or {})
        info["worker_restarts"] = self.restarts
        return wire.arrays_to_obs(arrays), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self._needs_reset or self._worker is None:
            raise RuntimeError(
                "HabitatEnv.step needs reset() first (after a worker crash, reset() starts a "
                "new worker)"
            )
        if isinstance(action, np.ndarray | np.generic):
            action = action.tolist()
        try:
            reply, arrays = self._worker.call({"op": "step", "action": action})
        except WorkerCrashedError:
            self._drop_worker()
            self._needs_reset = True
            raise
        terminated, truncated = bool(reply["terminated"]), bool(reply["truncated"])
        if terminated or truncated:
            self._needs_reset = True
        return (
            wire.arrays_to_obs(arrays),
            float(reply["reward"]),
            terminated,
            truncated,
            dict(reply.get("info") or {}),
        )

    def render(self) -> np.ndarray | None:
        if self.render_mode is None or self._worker is None:
            return None
        _, arrays = self._worker.call({"op": "render"})
        return arrays.get("frame")

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None
