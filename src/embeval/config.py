"""One way to read plain-data configs (YAML / JSON mappings) into typed dataclasses.

:func:`from_mapping` builds a dataclass from a mapping: unknown keys are refused with a message
that names the key, suggests the closest field ("did you mean") and lists the allowed ones; fields
whose type is itself a dataclass (or a list/tuple of, or ``X | None``) are built recursively from
nested mappings; missing keys take the dataclass's defaults; the class's own ``__post_init__``
validates values. Everything raises :class:`~embeval.errors.ConfigError` naming the field by its
dotted path (``spec.subjects[2].path: ...``).

``strict=True`` also checks every value given against the field's annotation (the run spec reads
this way): ``str`` is a non-empty string; ``int`` an integer (not a bool); ``float`` a finite number
(ints accepted, stored as float); ``bool`` a bool; ``X | None`` also takes None; ``tuple[X, ...]`` a
list (converted to a tuple) whose entries are checked as ``X``; ``dict`` a mapping (None = empty);
a missing field without a default is checked as None, so the message says what it must be. Options
per field, in ``dataclasses.field(metadata=...)`` (see :func:`opts`): ``min`` / ``max`` (numbers and list
entries; ``why`` is added to the message of a value over ``max``), ``max_len`` (lists), ``choices`` (a collection or a zero-argument callable returning one) with ``noun`` for the
message, ``nonempty`` / ``unique`` / ``scalar`` (a bare value read as a one-entry list) for lists,
``parse`` (a function ``(value, where) -> value`` that replaces the type check, ``item`` likewise for
list entries) and ``config=False`` for a field the caller fills in (not read from the mapping). A
class may define ``check_config(self, where)`` for rules across fields; strict reading calls it.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from embeval import checks
from embeval.errors import ConfigError

T = TypeVar("T")

__all__ = ["check_keys", "config_fields", "from_mapping", "in_range", "mapping", "no_nul", "non_empty_str", "number", "opts"]


def check_keys(data: Mapping[str, Any], known: typing.Iterable[str], where: str, noun: str = "field",
               note: str = "") -> None:
    """Raise :class:`ConfigError` naming the keys of ``data`` not in ``known``, with a suggestion and
    the allowed keys: ``spec.evaluater: unknown field; did you mean 'evaluator'? allowed: ...``.
    ``note`` is appended (e.g. where the misplaced values belong)."""
    known = list(known)
    unknown = sorted((k for k in data if k not in known), key=str)
    if not unknown:
        return
    allowed = f"allowed: {', '.join(sorted(map(str, known)))}"
    tail = f"; {note}" if note else ""
    hints = {k: m[0] for k in unknown if (m := difflib.get_close_matches(str(k), known, n=1))}
    if len(unknown) == 1:
        k = unknown[0]
        hint = f"; did you mean {hints[k]!r}?" if k in hints else ";"
        raise ConfigError(f"{where}.{k}: unknown {noun}{hint} {allowed}{tail}")
    named = ", ".join(f"{k!r} (did you mean {hints[k]!r}?)" if k in hints else repr(k) for k in unknown)
    raise ConfigError(f"{where}: unknown {noun}s {named}; {allowed}{tail}")


def opts(*, min: float | None = None, max: float | None = None, why: str = "", max_len: int | None = None,
         choices: Collection | Callable[[], Collection] | None = None,
         noun: str = "", nonempty: bool = False, unique: bool = False, scalar: bool = False,
         parse: Callable[[Any, str], Any] | None = None, item: Callable[[Any, str], Any] | None = None,
         config: bool = True) -> dict[str, Any]:
    """Field metadata for :func:`from_mapping` (``field(default=..., metadata=opts(min=1))``)."""
    return {"config": {"min": min, "max": max, "why": why, "max_len": max_len, "choices": choices, "noun": noun,
                       "nonempty": nonempty, "unique": unique, "scalar": scalar, "parse": parse, "item": item,
                       "config": config}}


_NO_OPTS = opts()["config"]


def config_fields(cls: type) -> dict[str, dataclasses.Field]:
    """The fields of dataclass ``cls`` a config mapping may set (``init`` ones not marked ``config=False``)."""
    return {f.name: f for f in dataclasses.fields(cls) if f.init and f.metadata.get("config", _NO_OPTS)["config"]}


def _err(where: str, msg: str) -> ConfigError:
    return ConfigError(f"{where}: {msg}")


def non_empty_str(x: Any, where: str) -> str:
    """``x`` if it is a non-empty string, else a ConfigError naming ``where`` (:func:`embeval.checks.string`)."""
    return checks.string(x, where)


def mapping(x: Any, where: str) -> Mapping:
    """``x`` as a mapping (None = empty), else a ConfigError naming ``where``."""
    if x is None:
        return {}
    if not isinstance(x, Mapping):
        raise _err(where, f"must be a mapping, got {type(x).__name__} {x!r}")
    return x


def number(x: Any, where: str, minimum: float | None = None, maximum: float | None = None, why: str = "") -> float:
    """``x`` as a float if it is a finite number (not a bool) ``>= minimum`` and ``<= maximum``, else a ConfigError
    (naming ``why`` the bound is there, when given): :func:`embeval.checks.number`."""
    return checks.number(x, where, minimum, maximum, why=why)


def no_nul(value: Any, where: str) -> Any:
    """``value`` unchanged when no string inside it (keys, nested mappings and lists included) holds a NUL character,
    else a ConfigError naming the first such entry as ``where.key[i]``: no file name or command can hold one, so a
    NUL read from a config would otherwise end in a ``ValueError`` deep inside the work."""
    stack = [(value, where)]
    while stack:
        v, w = stack.pop()
        if isinstance(v, str):
            pos = v.find("\0")
            if pos >= 0:
                raise _err(w, f"contains a NUL character (\\0) at position {pos}; remove it")
        elif isinstance(v, Mapping):
            for k, x in reversed(list(v.items())):
                if isinstance(k, str) and "\0" in k:
                    raise _err(w, f"the key {k!r} contains a NUL character (\\0); remove it")
                stack.append((x, f"{w}.{k}"))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{w}[{i}]") for i, x in reversed(list(enumerate(v))))
    return value


def in_range(x: Any, where: str, lo: float | None = None, hi: float | None = None, why: str = "") -> Any:
    """``x`` unchanged when ``lo <= x <= hi`` (either bound may be None), else a ConfigError naming ``where``,
    the allowed range and ``why`` (e.g. what one unit costs). For ``check_config`` bounds of typed fields
    (an int is checked by :func:`embeval.checks.integer`, anything else by :func:`embeval.checks.number`)."""
    exact = isinstance(x, int) and not isinstance(x, bool)
    (checks.integer if exact else checks.number)(x, where, lo, hi, why=why)
    return x


def finite_numbers(value: Any, where: str) -> Any:
    """``value`` unchanged when no float inside it (nested mappings and lists included) is NaN or infinite, else a
    ConfigError naming the first such entry as ``where.key[i]`` (free-form arguments, e.g. a subject's ``params``),
    in the wording of :func:`embeval.checks.number`."""
    if isinstance(value, float) and not math.isfinite(value):
        checks.number(value, where)
    if isinstance(value, Mapping):
        for k, v in value.items():
            finite_numbers(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            finite_numbers(v, f"{where}[{i}]")
    return value


def _optional(tp: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(tp, False)``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(args) < len(typing.get_args(tp)):
            return args[0], True
    return tp, False


def _checked(value: Any, tp: Any, where: str, o: Mapping[str, Any]) -> Any:
    """``value`` checked (and converted) against type ``tp`` and the field options ``o`` (strict reading)."""
    if o["parse"] is not None:
        return o["parse"](value, where)
    tp, optional = _optional(tp)
    if value is None and optional:
        return None
    if o["choices"] is not None:
        return checks.choice(value, where, o["choices"], o["noun"] or "value")
    origin = typing.get_origin(tp) or tp
    if dataclasses.is_dataclass(tp):
        return from_mapping(tp, mapping(value, where), where, strict=True)
    if origin in (tuple, list):
        return _sequence(value, tp, where, o)
    if origin in (dict, Mapping) or tp is dict:
        return dict(mapping(value, where))
    if tp is str:
        return non_empty_str(value, where)
    if tp is bool:
        return checks.flag(value, where)
    if tp is int:
        return checks.integer(value, where, o["min"], o["max"], why=o["why"])
    if tp is float:
        return checks.number(value, where, o["min"], o["max"], why=o["why"])
    return value  # Any and other annotations: as given


def _sequence(value: Any, tp: Any, where: str, o: Mapping[str, Any]) -> tuple | list:
    if value is None:
        value = []
    if o["scalar"] and isinstance(value, (str, int)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _err(where, f"must be a list, got {type(value).__name__}")
    if o["nonempty"] and not value:
        raise _err(where, "must not be empty")
    if o["max_len"] is not None and len(value) > o["max_len"]:
        why = f" ({o['why']})" if o["why"] else ""
        raise _err(where, f"has {len(value)} entries, at most {o['max_len']} are allowed{why}")
    args = typing.get_args(tp)
    inner = args[0] if args else Any
    entry = {**_NO_OPTS, "min": o["min"], "max": o["max"], "why": o["why"], "parse": o["item"]}
    out = [_checked(v, inner, f"{where}[{i}]", entry) for i, v in enumerate(value)]
    if o["unique"]:  # a set where the entries allow it: a long list is checked in linear time
        seen: set = set()
        seen_list: list = []
        for v in out:
            try:
                dup = v in seen
                seen.add(v)
            except TypeError:  # unhashable entries (mappings): compared one by one
                dup = v in seen_list
                seen_list.append(v)
            if dup:
                raise _err(where, f"duplicate entry {v!r}")
    return tuple(out) if (typing.get_origin(tp) or tp) is tuple else out


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


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable forward references: no nesting for this class
        return {}


def from_mapping(cls: type[T], data: Mapping[str, Any] | None, where: str, strict: bool = False) -> T:
    """Build dataclass ``cls`` from ``data`` (None = all defaults); ``where`` names it in errors;
    ``strict`` checks every field against its annotation and options (module docstring)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    flds = config_fields(cls)
    check_keys(data, flds, where)
    hints = _hints(cls)
    if strict:
        return _strict(cls, data, where, flds, hints)
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


def _strict(cls: type[T], data: Mapping[str, Any], where: str, flds: Mapping[str, dataclasses.Field],
            hints: Mapping[str, Any]) -> T:
    kwargs = {}
    for name, f in flds.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        o = f.metadata.get("config", _NO_OPTS)
        tp = hints.get(name, Any)
        nested = dataclasses.is_dataclass(tp)  # a missing nested dataclass is read from {} (its checks run)
        if name in data or required or nested:
            kwargs[name] = _checked(data.get(name), tp, f"{where}.{name}", o)
    obj = cls(**kwargs)
    check = getattr(obj, "check_config", None)
    if check is not None:
        check(where)
    return obj
