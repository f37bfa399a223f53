"""The env worker: a script run by another interpreter, serving one env over the wire protocol.

Usage (``HabitatEnv`` starts it; by hand only for debugging)::

    PYTHON /path/to/memrl/envs/habitat/worker.py --fd N

``--fd`` is the inherited socket (one end of a socketpair). The script needs only the standard
library and numpy, plus the backend's own packages: ``habitat`` (habitat-lab + habitat-sim) for the
``habitat`` backend, memrl's ObjNav-lite (with gymnasium, i.e. memrl's own venv) for ``objnav``.
Everything it prints goes to stderr (the client keeps it in a log file), so stdout chatter from
habitat-sim can never corrupt the protocol.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
logger = logging.getLogger("memrl.envs.habitat.worker")


def _load_sibling(name: str) -> Any:
    """Imports a file next to this script under a private name (no package, no sys.path entry)."""
    spec = importlib.util.spec_from_file_location(f"_memrl_worker_{name}", _HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def make_backend(backend: str, task: dict[str, Any], render_mode: str | None) -> Any:
    """Builds the env the worker serves: anything with gymnasium's reset/step/render/close."""
    if backend == "objnav":
        repo_root = str(_HERE.parents[2])
        if repo_root not in sys.path:
            sys.path.insert(0, repo_root)
        from memrl.envs.objnav import ObjNavEnv

        return ObjNavEnv(render_mode=render_mode, **task)
    if backend == "habitat":
        return _load_sibling("habitat_task").ExtObjNavTask(render_mode=render_mode, **task)
    raise ValueError(f"Unknown worker backend {backend!r}. Available: ['habitat', 'objnav']")


def serve(sock: socket.socket) -> int:
    """Answers requests until ``close`` or until the client goes away; returns the exit code."""
    wire = _load_sibling("wire")
    wire.send(
        sock,
        {
            "hello": wire.HELLO,
            "protocol": wire.PROTOCOL_VERSION,
            "pid": os.getpid(),
            "python": sys.version.split()[0],
        },
    )
    env = None
    while True:
        try:
            request, _ = wire.recv(sock)
        except wire.PeerClosed:
            logger.info("client went away; exiting")
            return 0
        op = request.get("op")
        try:
            if op == "make":
                env = make_backend(
                    request["backend"], request.get("task") or {}, request.get("render_mode")
                )
                wire.send(
                    sock,
                    {
                        "ok": True,
                        "observation_space": wire.describe_space(env.observation_space),
                        "action_space": wire.describe_space(env.action_space),
                    },
                )
            elif op == "reset":
                obs, info = _need(env).reset(
                    seed=request.get("seed"), options=request.get("options")
                )
                wire.send(sock, {"ok": True, "info": info}, wire.obs_to_arrays(obs))
            elif op == "step":
                obs, reward, terminated, truncated, info = _need(env).step(request["action"])
                wire.send(
                    sock,
                    {
                        "ok": True,
                        "reward": float(reward),
                        "terminated": bool(terminated),
                        "truncated": bool(truncated),
                        "info": info,
                    },
                    wire.obs_to_arrays(obs),
                )
            elif op == "render":
                frame = _need(env).render()
                wire.send(sock, {"ok": True}, {} if frame is None else {"frame": frame})
            elif op == "close":
                if env is not None:
                    env.close()
                wire.send(sock, {"ok": True})
                return 0
            else:
                raise ValueError(f"unknown op {op!r}; ops: make, reset, step, render, close")
        except Exception as err:  # every failure goes back to the client; the worker lives on
            wire.send(
                sock,
                {
                    "ok": False,
                    "error": type(err).__name__,
                    "message": str(err),
                    "traceback": traceback.format_exc(),
                },
            )


def _need(env: Any) -> Any:
    if env is None:
        raise RuntimeError("no env yet: the first op must be 'make'")
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="inherited socket file descriptor")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    os.dup2(2, 1)  # stray prints of the simulator go to the log, never into the protocol
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s worker[%(process)d] %(levelname)s %(message)s",
    )
    sock = socket.socket(fileno=args.fd)
    try:
        return serve(sock)
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
