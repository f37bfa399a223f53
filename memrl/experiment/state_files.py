"""RLlib's pickled state files read for their structure only: whole or not, and the names and
shapes of the weights a module state holds, without the weights themselves.

``read_structure`` decodes a pickle with the standard library's own decoder but builds nothing
the file names: every class or function it refers to becomes an inert placeholder (nothing is
imported, no code of the file runs), the payload of an array is skipped with a seek (a check of
a 7B model's checkpoint reads its names and shapes, not its gigabytes), and arrays become
``Weights`` that keep only their shape. A file cut short or corrupted fails to decode.
"""

from __future__ import annotations

import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO


@dataclass(frozen=True)
class Weights:
    """An array of a state file, by its shape only (None: an array stored in a way not read)."""

    shape: tuple[int, ...] | None


class _Opaque:
    """What the state file builds besides arrays: takes any arguments, keeps the items set on it
    (a mapping's keys and values), and ignores the rest."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Opaque:
        return _Opaque()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        self.__dict__.setdefault("entries", {})[key] = value

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def add(self, item: Any) -> None:
        pass


class _NumpyArray(Weights):
    """numpy's pickle of protocols 2 to 4: ``_reconstruct`` makes an empty array, then its state
    (version, shape, dtype, fortran order, data) sets it."""

    def __init__(self, *args: Any) -> None:
        object.__setattr__(self, "shape", None)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and isinstance(state[1], tuple):
            object.__setattr__(self, "shape", tuple(int(n) for n in state[1]))


def _numpy_frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any = "C") -> Weights:
    return Weights(tuple(int(n) for n in shape))


def _numpy_scalar(*args: Any) -> Weights:
    return Weights(())


def _torch_tensor(storage: Any, offset: Any, size: Any, *rest: Any) -> Weights:
    return Weights(tuple(int(n) for n in size))


def _torch_subclass(func: Any, new_type: Any, args: Any, state: Any = None) -> Any:
    return func(*args)


def _torch_parameter(data: Any, *rest: Any) -> Any:
    return data


# The entry points of numpy's and torch's array pickles (their file formats: stable, since old
# files must keep loading), each read as the shape it records.
_ARRAY_BUILDERS: dict[tuple[str, str], Any] = {
    ("numpy", "_frombuffer"): _numpy_frombuffer,
    ("numpy", "_reconstruct"): _NumpyArray,
    ("numpy", "scalar"): _numpy_scalar,
    ("torch", "_rebuild_tensor_v2"): _torch_tensor,
    ("torch", "_rebuild_from_type_v2"): _torch_subclass,
    ("torch", "_rebuild_parameter"): _torch_parameter,
    ("torch", "_rebuild_parameter_with_state"): _torch_parameter,
}


class _SkippingFile:
    """A file that seeks over the next read when asked to (an array's payload)."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self.file = file
        self.size = size
        self.skip_next = False

    def read(self, n: int) -> bytes:
        if not self.skip_next:
            return self.file.read(n)
        self.skip_next = False
        end = self.file.tell() + n
        if end > self.size:
            raise EOFError(f"an array's data runs {end - self.size} bytes past the end")
        self.file.seek(n, os.SEEK_CUR)
        return b""

    def readline(self) -> bytes:
        return self.file.readline()


class _StructureReader(pickle._Unpickler):  # the pure-Python decoder: its opcodes can be replaced
    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, source: _SkippingFile) -> None:
        super().__init__(source)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        return _ARRAY_BUILDERS.get((module.split(".")[0], name), _Opaque)

    def _skip_payload(self, size: int) -> None:
        # Inside a pickle frame the bytes are already in memory; outside one the file seeks.
        self.source.skip_next = True
        self.read(size)
        self.source.skip_next = False
        self.append(_Opaque())

    def _load_binbytes(self) -> None:
        (size,) = struct.unpack("<I", self.read(4))
        self._skip_payload(size)

    def _load_binbytes8(self) -> None:
        (size,) = struct.unpack("<Q", self.read(8))
        self._skip_payload(size)

    dispatch[pickle.BINBYTES[0]] = _load_binbytes
    dispatch[pickle.BINBYTES8[0]] = _load_binbytes8
    dispatch[pickle.BYTEARRAY8[0]] = _load_binbytes8


def read_structure(path: str | os.PathLike[str]) -> Any:
    """The structure of a pickle file: mappings and sequences as they are, arrays as
    ``Weights``, any other object as an inert placeholder whose ``entries`` (if any were set)
    hold its items.

    Raises:
        ValueError: the file is missing, a folder, empty, cut short or corrupt (the message,
            to follow the file's name, says which).
    """
    p = Path(path)
    if p.is_dir():
        raise ValueError("is a folder where a file should be")
    if not p.is_file():
        raise ValueError("is missing")
    size = p.stat().st_size
    if size == 0:
        raise ValueError("is empty")
    with open(path, "rb") as f:
        try:
            return _StructureReader(_SkippingFile(f, size)).load()
        except Exception as err:  # noqa: BLE001  (any failure to decode is a damaged file)
            detail = " ".join(str(err).split()) or "the data ends early"
            raise ValueError(f"is cut short or corrupt ({detail})") from None


def weight_shapes(path: str | os.PathLike[str]) -> dict[str, tuple[int, ...] | None]:
    """The names and shapes of the weights in a module state file (an RLModule's
    ``module_state.pkl``: a mapping of names to arrays; a scalar has shape ``()``).

    Raises:
        ValueError: the file is damaged or holds no mapping of names to weights.
    """
    state = read_structure(path)
    if isinstance(state, _Opaque):  # an OrderedDict, as torch's state_dict is
        state = state.__dict__.get("entries", {})
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise ValueError("holds no mapping of weight names to arrays")
    return {
        name: value.shape if isinstance(value, Weights) else _scalar_shape(value)
        for name, value in state.items()
    }


def _scalar_shape(value: Any) -> tuple[int, ...] | None:
    """A number stands for a 0-d weight (RLlib stores 0-d tensors as Python numbers)."""
    return () if isinstance(value, int | float | bool) else None
