"""The env-worker wire protocol (version 1): framed JSON headers followed by raw numpy arrays.

This file is shared by both ends and so imports only the standard library and numpy: the worker
runs under another interpreter (habitat's Python 3.9 env) that has neither gymnasium nor memrl's
dependencies. The worker loads it by file path.

Frame: ``b"MRLW"``, the header length as a big-endian uint32, the UTF-8 JSON header, then the bytes
of each array listed in ``header["arrays"]`` as ``[name, dtype, shape]``, C order, in that order.

Conversation (client = ``HabitatEnv``, worker = ``worker.py``):

1. worker -> ``{"hello": "memrl-env-worker", "protocol": 1, "pid", "python"}``;
2. client -> ``{"op": "make", "backend", "task", "render_mode"}``;
   worker -> ``{"ok": true, "observation_space", "action_space"}`` (spaces as ``describe_space``);
3. client -> ``{"op": "reset", "seed", "options"}``; worker -> ``{"ok": true, "info"}`` + obs;
4. client -> ``{"op": "step", "action"}``;
   worker -> ``{"ok": true, "reward", "terminated", "truncated", "info"}`` + obs;
5. client -> ``{"op": "render"}``; worker -> ``{"ok": true}`` + ``frame`` (absent: no frame);
6. client -> ``{"op": "close"}``; worker -> ``{"ok": true}`` and exits 0.

Any failed op is answered ``{"ok": false, "error", "message", "traceback"}`` and the worker stays
up. Observations travel as arrays named ``obs`` (Box) or ``obs/KEY`` (Dict).
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import numpy as np

PROTOCOL_VERSION = 1
MAGIC = b"MRLW"
HELLO = "memrl-env-worker"
_PREFIX = struct.Struct(">4sI")
_MAX_HEADER = 16 * 1024 * 1024


class ProtocolError(RuntimeError):
    """The peer sent bytes that are not a frame of this protocol version."""


class PeerClosed(ConnectionError):
    """The peer closed the connection (for a worker: it exited)."""


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot send {type(value).__name__} in a protocol header")


def send(sock: socket.socket, header: dict[str, Any], arrays: dict[str, np.ndarray] | None = None):
    """Sends one frame: a JSON-able header and named arrays."""
    arrays = {k: np.require(v, requirements="C") for k, v in (arrays or {}).items()}
    header = dict(header)
    header["arrays"] = [[k, v.dtype.str, list(v.shape)] for k, v in arrays.items()]
    body = json.dumps(header, default=_json_default).encode("utf-8")
    # One write per frame: every extra syscall is a wake-up of the peer on a busy machine.
    parts = [_PREFIX.pack(MAGIC, len(body)), body]
    parts += [value.tobytes() for value in arrays.values() if value.nbytes]
    sock.sendall(b"".join(parts))


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise PeerClosed(f"peer closed the connection ({got} of {n} bytes read)")
        got += k
    return buf


def recv(sock: socket.socket) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Receives one frame; returns (header, arrays)."""
    magic, length = _PREFIX.unpack(_recv_exact(sock, _PREFIX.size))
    if magic != MAGIC:
        raise ProtocolError(f"bad frame magic {bytes(magic)!r}, expected {MAGIC!r}")
    if length > _MAX_HEADER:
        raise ProtocolError(f"frame header of {length} bytes exceeds {_MAX_HEADER}")
    header = json.loads(_recv_exact(sock, length).decode("utf-8"))
    arrays = {}
    for name, dtype, shape in header.pop("arrays", []):
        dt = np.dtype(dtype)
        count = int(np.prod(shape)) if shape else 1
        raw = _recv_exact(sock, count * dt.itemsize)
        arrays[name] = np.frombuffer(raw, dtype=dt).reshape(tuple(shape))
    return header, arrays


def describe_space(space: Any) -> dict[str, Any]:
    """A JSON description of a gym or gymnasium Box / Discrete / Dict space (duck-typed)."""
    kind = type(space).__name__
    if kind == "Discrete":
        return {"type": "Discrete", "n": int(space.n)}
    if kind == "Box":
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).str,
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if kind == "Dict":
        return {"type": "Dict", "spaces": {k: describe_space(v) for k, v in space.spaces.items()}}
    raise TypeError(f"the protocol carries Box, Discrete and Dict spaces, not {kind}")


def _bound(value: Any) -> Any:
    # Image boxes have a million equal bounds: send one number when they are all the same.
    arr = np.asarray(value)
    if arr.size and (arr == arr.flat[0]).all():
        return arr.flat[0].item()
    return arr.tolist()


def obs_to_arrays(obs: Any) -> dict[str, np.ndarray]:
    """An observation (array or dict of arrays) as named arrays."""
    if isinstance(obs, dict):
        return {f"obs/{k}": np.asarray(v) for k, v in obs.items()}
    return {"obs": np.asarray(obs)}


def arrays_to_obs(arrays: dict[str, np.ndarray]) -> Any:
    """Inverse of ``obs_to_arrays``."""
    if "obs" in arrays:
        return arrays["obs"]
    return {k[4:]: v for k, v in arrays.items() if k.startswith("obs/")}
