"""One way to read plain-data configs (YAML / JSON mappings) into typed dataclasses.

:func:`from_mapping` builds a dataclass from a mapping: unknown keys are refused with a message
that names them, suggests the closest field ("did you mean") and lists the known ones; fields whose
type is itself a dataclass (or a list of, or ``X | None``) are built recursively from nested
mappings; missing keys take the dataclass's defaults; the class's own ``__post_init__`` validates
values. Everything raises :class:`~embeval.errors.ConfigError`.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from embeval.errors import ConfigError

T = TypeVar("T")

__all__ = ["check_keys", "from_mapping"]


def check_keys(data: Mapping[str, Any], known: typing.Iterable[str], where: str) -> None:
    """Raise :class:`ConfigError` naming every key of ``data`` not in ``known`` (with a suggestion)."""
    known = list(known)
    unknown = sorted(set(data) - set(known))
    if not unknown:
        return
    hints = [f"{k!r} -> did you mean {m[0]!r}?" for k in unknown if (m := difflib.get_close_matches(str(k), known, n=1))]
    hint = f" ({'; '.join(hints)})" if hints else ""
    raise ConfigError(f"{where}: unknown field(s) {unknown}{hint}; known: {sorted(known)}")


def _dataclass_in(tp: Any) -> tuple[type | None, bool]:
    """``(dataclass, is_list)`` when ``tp`` is a dataclass, ``list[dataclass]`` or either ``| None``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is not type(None):
                found = _dataclass_in(arg)
                if found[0] is not None:
                    return found
        return None, False
    if origin in (list, tuple) and typing.get_args(tp):
        inner = typing.get_args(tp)[0]
        return (inner, True) if dataclasses.is_dataclass(inner) else (None, False)
    return (tp, False) if isinstance(tp, type) and dataclasses.is_dataclass(tp) else (None, False)


def from_mapping(cls: type[T], data: Mapping[str, Any] | None, where: str) -> T:
    """Build dataclass ``cls`` from ``data`` (None = all defaults); ``where`` names it in errors."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    flds = {f.name: f for f in dataclasses.fields(cls) if f.init}
    check_keys(data, flds, where)
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable forward references: no nesting for this class
        hints = {}
    kwargs = dict(data)
    for name, value in data.items():
        sub, many = _dataclass_in(hints.get(name))
        if sub is None:
            continue
        if many and isinstance(value, (list, tuple)):
            kwargs[name] = [from_mapping(sub, v, f"{where}.{name}[{i}]") if isinstance(v, Mapping) else v
                            for i, v in enumerate(value)]
        elif not many and isinstance(value, Mapping):
            kwargs[name] = from_mapping(sub, value, f"{where}.{name}")
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field missing
        raise ConfigError(f"{where}: {exc}") from None
