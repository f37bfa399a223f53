"""Typed, frozen settings dataclasses built from plain dicts (YAML), with errors that name the key.

``from_dict(cls, data, where)`` maps a dict onto a frozen dataclass 1:1: unknown keys, missing
required keys and values of the wrong type raise ``ValueError``/``TypeError`` whose message names
the dotted key path, what was received and what is allowed. Every field carries a docstring
(the string literal under it). ``to_dict`` is the way back (what config.yaml holds).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

T = TypeVar("T")


def from_dict(cls: type[T], data: Any, where: str) -> T:
    """Builds dataclass ``cls`` from ``data``; ``where`` is the key path used in error messages."""
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TypeError(
            f"{where or 'the config'} must be a mapping of {_field_list(cls)}, got {data!r}"
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(
            f"Unknown key(s) {', '.join(_join(where, k) for k in unknown)}. "
            f"Allowed keys of {where or 'the config'}: {sorted(fields)}"
        )
    kwargs = {}
    for name, f in fields.items():
        key = _join(where, name)
        if name in data:
            kwargs[name] = coerce(data[name], hints[name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"Missing required key {key}")
    try:
        obj = cls(**kwargs)
    except ValueError as err:  # a __post_init__ check: say where in the config it failed
        raise ValueError(f"{where or 'the config'}: {err}") from err
    check = getattr(obj, "validate", None)
    if callable(check):
        check(where)
    return obj


def coerce(value: Any, hint: Any, key: str) -> Any:
    """Checks ``value`` against type ``hint`` (ints widen to floats); TypeError names ``key``."""
    origin = get_origin(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        errors = []
        for option in get_args(hint):
            try:
                return coerce(value, option, key)
            except (TypeError, ValueError) as err:
                errors.append(str(err))
        raise TypeError(f"{key} must be {_type_name(hint)}, got {value!r}")
    if hint is type(None):
        if value is not None:
            raise TypeError(f"{key} must be null, got {value!r}")
        return None
    if origin is Literal:
        if value not in get_args(hint):
            raise ValueError(f"{key} must be one of {list(get_args(hint))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, key)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise TypeError(f"{key} must be a list, got {value!r}")
        (item,) = get_args(hint)[:1] or (Any,)
        items = [coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{key} must be a mapping, got {value!r}")
        kt, vt = get_args(hint) or (Any, Any)
        return {coerce(k, kt, f"{key} key"): coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{key} must be a number, got {value!r}")
        return float(value)
    if hint is int:
        # A whole float is a count written the short way (stop_timesteps: 2e6).
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{key} must be an integer, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{key} must be true or false, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise TypeError(f"{key} must be a string, got {value!r}")
        return value
    if isinstance(hint, type) and not isinstance(value, hint):
        raise TypeError(f"{key} must be {hint.__name__}, got {value!r}")
    return value


def to_dict(obj: Any) -> Any:
    """The inverse of from_dict: plain dicts/lists for YAML."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
        tag = getattr(obj, "TAG_KEY", None)
        if tag:
            out = {tag[0]: tag[1], **out}
        return out
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _field_list(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls) if f.init)


def _type_name(hint: Any) -> str:
    if get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(hint))
    if hint is type(None):
        return "null"
    words = {float: "a number", int: "an integer", str: "a string", bool: "true or false"}
    if hint in words:
        return words[hint]
    if get_origin(hint) in (list, tuple):
        return "a list"
    if get_origin(hint) is dict:
        return "a mapping"
    return getattr(hint, "__name__", str(hint))
