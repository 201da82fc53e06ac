"""One registry for every pluggable thing: subject adapters, arm and policy backends, camera sources,
graph stages, demo stages, run evaluators and run backends.

A :class:`Registry` maps a name to an object or to a lazy ``"module:attr"`` string that is imported on
first use (so heavy packages load only when asked for). Third-party packages add entries without
editing embeval through an entry-point group, e.g. in their ``pyproject.toml``::

    [project.entry-points."embeval.subject_adapters.policy"]
    my_vla = "my_package.adapter:MyVLAPolicy"

A wrong name is a :class:`~embeval.errors.ConfigError` that says "did you mean" and lists the choices.
The registry never writes attributes onto what it stores.
"""
from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, TypeVar

from embeval.errors import ConfigError

T = TypeVar("T")

__all__ = ["RecordKind", "Registry", "RegistryView", "load_target"]


def load_target(target: str) -> Any:
    """Import ``"package.module:attr"`` (``attr`` may be dotted) and return the attribute."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"registry target {target!r} must look like 'package.module:attribute'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class RecordKind:
    """What a registry of typed records holds (tasks, IQA metrics, ROS nodes, perturbation axes).

    ``cls``: the record type (every entry is one); ``key``: its attribute naming it; ``about``: its attribute
    describing it (listings); ``home``: the public module that exports ``cls``, for messages (default: where it is
    defined); ``adder``: the function users register with, for messages; ``check``: further checks of a record
    before it is registered (raises :class:`ConfigError`), after the type check.
    """

    cls: type
    key: str = "name"
    about: str = "description"
    home: str = ""
    adder: str = "register_record"
    check: Callable[[Any], None] | None = None

    @property
    def path(self) -> str:
        """``cls`` as users import it ("embeval.sim.tasks.Task")."""
        return f"{self.home or self.cls.__module__}.{self.cls.__name__}"


@dataclass
class _Entry:
    target: Any  # the object, or "module:attr" until first use
    description: str = ""
    origin: str = "built-in"  # "built-in", "registered", or "entry point <dist>"


class Registry(Generic[T]):
    """Name -> object (or lazy ``"module:attr"``), with entry-point plugins and helpful errors.

    ``what`` names the things in messages ("policy backend"); ``group`` is the entry-point group
    scanned once, on the first lookup or listing (entries named there never replace a built-in of
    the same name: the built-in wins and the plugin is reported by :meth:`conflicts`); ``hint`` is
    appended to the unknown-name error (how to add one); ``builtins`` names a module imported once,
    before the first lookup, listing or registration, whose import registers the built-in entries
    (one file per entry, discovered there, instead of a list of names here). ``record``: a registry of typed
    records (:meth:`register_record`, :meth:`get_record`, :meth:`records`, :meth:`remove`).
    """

    def __init__(self, what: str, group: str | None = None, hint: str = "",
                 entries: dict[str, Any] | None = None, builtins: str | None = None, record: RecordKind | None = None):
        self.what, self.group, self.hint, self.record = what, group, hint, record
        self._builtins = builtins  # module to import before first use (None once imported)
        self._entries: dict[str, _Entry] = {}
        self._scanned = group is None
        self._conflicts: list[str] = []
        for name, target in (entries or {}).items():
            self._entries[name] = _Entry(target)

    # -- registering ---------------------------------------------------------------------------
    def register(self, name: str, target: Any = None, *, description: str = "") -> Any:
        """Register ``target`` (an object or ``"module:attr"``) under ``name``; without ``target``,
        a decorator. Re-registering a name replaces it (a user may override a built-in)."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{self.what} names must be non-empty strings, got {name!r}")
        self._load_builtins()  # built-ins first, so a user's entry of the same name replaces the built-in

        def deco(obj):
            self._entries[name] = _Entry(obj, description, "registered")
            return obj

        return deco if target is None else deco(target)

    def unregister(self, name: str) -> None:
        """Remove ``name`` (KeyError when absent)."""
        self._load_builtins()
        del self._entries[name]

    # -- registries of typed records ---------------------------------------------------------------
    def _kind(self) -> RecordKind:
        if self.record is None:
            raise TypeError(f"the {self.what} registry holds no typed records (give Registry(record=RecordKind(...)))")
        return self.record

    def register_record(self, rec: Any) -> Any:
        """Register the record ``rec`` under its key attribute, described by its ``about`` attribute (replacing
        one of the same name); returns it. :class:`ConfigError` when ``rec`` is not a record of this registry."""
        kind = self._kind()
        if not isinstance(rec, kind.cls):
            raise ConfigError(f"{kind.adder} takes an {kind.path}, got {type(rec).__name__}")
        if kind.check is not None:
            kind.check(rec)
        self.register(getattr(rec, kind.key), rec, description=getattr(rec, kind.about))
        return rec

    def remove(self, name: str) -> None:
        """Remove a registered ``name``; :class:`ConfigError` naming the choices when absent (the ``unregister_*``
        of the record registries)."""
        if name not in self:
            raise self.unknown(name)
        self.unregister(name)

    def get_record(self, name: str, field: str = "") -> Any:
        """:meth:`get` of a registry of typed records: the entry, checked to be a record (a plugin's entry point
        may name anything)."""
        kind = self._kind()
        obj = self.get(name, field)
        if not isinstance(obj, kind.cls):
            raise ConfigError(f"{self.what} {name!r} is a {type(obj).__name__}, not an {kind.path} record")
        return obj

    def records(self) -> list[Any]:
        """Every record, in registration order (built-ins, then registered, then plugins)."""
        return [self.get_record(n) for n in self.names()]

    def _load_builtins(self) -> None:
        if self._builtins is not None:
            module, self._builtins = self._builtins, None  # cleared first: the import registers into self
            importlib.import_module(module)

    def _scan(self) -> None:
        self._load_builtins()
        if self._scanned:
            return
        self._scanned = True
        try:
            eps = metadata.entry_points(group=self.group)
        except Exception:  # noqa: BLE001 - broken metadata of an unrelated package must not break embeval
            return
        for ep in eps:
            dist = getattr(getattr(ep, "dist", None), "name", "?")
            if ep.name in self._entries:
                self._conflicts.append(f"{ep.name} (entry point of {dist}; the built-in is kept)")
                continue
            self._entries[ep.name] = _Entry(ep.value, f"plugin from {dist}", f"entry point {dist}")

    # -- lookup --------------------------------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        self._scan()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        """Every name, in registration order (built-ins first, then registered, then plugins)."""
        self._scan()
        return list(self._entries)

    def unknown(self, name: str, field: str = "") -> ConfigError:
        """The error for an unknown ``name`` ("did you mean", the choices, how to add one)."""
        choices = sorted(self.names())
        close = difflib.get_close_matches(str(name), choices, n=1)
        mean = f" (did you mean {close[0]!r}?)" if close else ""
        where = f"{field}: " if field else ""
        hint = f" ({self.hint})" if self.hint else ""
        return ConfigError(f"{where}unknown {self.what} {name!r}{mean}; choose from {', '.join(choices) or '(none)'}{hint}")

    def get(self, name: str, field: str = "") -> T:
        """The object registered as ``name`` (imported on first use); :class:`ConfigError` otherwise."""
        self._scan()
        entry = self._entries.get(name)
        if entry is None:
            raise self.unknown(name, field)
        if isinstance(entry.target, str):
            try:
                entry.target = load_target(entry.target)
            except ImportError as exc:
                raise ConfigError(f"{self.what} {name!r} ({entry.origin}) cannot be imported: {exc}") from exc
        return entry.target

    def describe(self) -> list[tuple[str, str]]:
        """``(name, description)`` for every entry, in registration order; imports nothing."""
        self._scan()
        rows = []
        for name in self._entries:
            e = self._entries[name]
            if e.description:
                desc = e.description
            elif isinstance(e.target, str):
                desc = e.target
            else:
                desc = f"{getattr(e.target, '__module__', '?')}:{getattr(e.target, '__qualname__', e.target)}"
            rows.append((name, desc))
        return rows

    def conflicts(self) -> list[str]:
        """Entry-point plugins ignored because a built-in has the same name."""
        self._scan()
        return list(self._conflicts)


class RegistryView(Mapping[str, T]):
    """A live read-only ``name -> object`` view of a :class:`Registry`, for code that reads a dict: ``view[name]``
    imports a lazy entry on first use; an unknown name is a ``KeyError`` as for a dict (the registry's own
    :meth:`Registry.get` says "did you mean")."""

    def __init__(self, registry: Registry[T]):
        self.registry = registry

    def __getitem__(self, name: str) -> T:
        if name not in self.registry:
            raise KeyError(name)
        return self.registry.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.registry

    def __iter__(self) -> Iterator[str]:
        return iter(self.registry.names())

    def __len__(self) -> int:
        return len(self.registry.names())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self)} {self.registry.what}s: {', '.join(self.registry.names())}>"
