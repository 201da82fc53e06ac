"""Primitive argument checks: the one home of the rules (and the wording) every entry point shares.

The CLI's argparse types (:mod:`embeval_cli._util`), the config reader (:mod:`embeval.config`), ROS parameters
(:func:`embeval_ros.runtime.typed`), safety limits (:mod:`embeval.robot.safety`) and server limits
(:mod:`embeval.serving.limits`, :mod:`embeval.serving.batching`) call these, so one bad value reads the same
wherever it is given. Each check returns the value (converted where said) or raises
:class:`~embeval.errors.ConfigError` as ``"<where>: <problem>[ (<why>)][; <fix>]"``, one wording per kind of
mistake:

* wrong type (a string, None, a bool for a number, a fraction for an integer, NaN or an infinity):
  ``must be an integer in 1..65535, got 'http'`` / ``must be a finite number >= 0, got nan``;
* out of range: ``must lie in 1..65535, got 70000`` (both bounds), ``must be >= 1, got 0`` (one bound);
  an open lower bound reads ``(0, 3] m/s`` or ``> 0``;
* a vector: ``must be 3 finite numbers, got [...]``; a choice: ``unknown mode 'x'; choose from a, b``;
  a flag: ``must be true or false, got None``; a string: ``must be a (non-empty) string, got 3``.

Booleans are never numbers (YAML ``yes`` must not read as 1); huge integers are shown by their digit count.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

from embeval.errors import ConfigError

__all__ = ["MAX_PORT", "MAX_SEED", "choice", "flag", "integer", "is_finite_number", "mib", "number", "port", "seed",
           "shown", "string", "vector"]

#: seeds are whole numbers 0 .. 2**63 - 1 (numpy's generators refuse negative ones, torch's larger ones)
MAX_SEED = 2**63 - 1
#: the largest TCP port
MAX_PORT = 65535


def shown(x: Any) -> str:
    """``repr(x)``; a numpy scalar as the Python number it holds (``nan``, not ``np.float64(nan)``); a huge integer as
    its number of digits (``1180591620717411303424`` reads as a 22-digit integer)."""
    if type(x).__module__ == "numpy" and hasattr(x, "item") and getattr(x, "shape", None) == ():
        x = x.item()
    text = repr(x)
    return f"a {len(text)}-digit integer" if isinstance(x, int) and len(text) > 24 else text


def _bound(x: float) -> str:
    """A bound as written: 4294967295 and 604800 (not 4.29497e+09 and 604800.0), 0.5 as 0.5, 2**63-1 as such."""
    if isinstance(x, int) and x >= 2**32 and (x + 1) & x == 0:
        return f"2**{x.bit_length()}-1"
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _range(lo: float | None, hi: float | None, lo_open: bool, unit: str) -> str:
    """``lo..hi`` / ``(lo, hi]`` / ``>= lo`` / ``> lo`` / ``<= hi`` plus `` unit`` ("" when unbounded)."""
    if lo is not None and hi is not None:
        rng = f"({_bound(lo)}, {_bound(hi)}]" if lo_open else f"{_bound(lo)}..{_bound(hi)}"
    elif lo is not None:
        rng = f"{'>' if lo_open else '>='} {_bound(lo)}"
    elif hi is not None:
        rng = f"<= {_bound(hi)}"
    else:
        return ""
    return f"{rng} {unit}" if unit else rng


def _fail(where: str, problem: str, why: str = "", fix: str = "") -> ConfigError:
    return ConfigError(f"{where}: {problem}{f' ({why})' if why else ''}{f'; {fix}' if fix else ''}")


def _in_range(x: float, where: str, lo: float | None, hi: float | None, lo_open: bool, unit: str, why: str,
              fix: str) -> None:
    below = lo is not None and (x <= lo if lo_open else x < lo)
    if below or (hi is not None and x > hi):
        rng = _range(lo, hi, lo_open, unit)
        verb = "lie in" if lo is not None and hi is not None else "be"
        raise _fail(where, f"must {verb} {rng}, got {shown(x)}", why, fix)


def _is_number(x: Any) -> bool:
    """A real number that is not a bool (numpy scalars included)."""
    import numbers

    return isinstance(x, numbers.Real) and not isinstance(x, bool) and type(x).__name__ != "bool_"


def _finite(x: Any) -> bool:
    """Whether the number ``x`` is finite as a float (an integer beyond the float range is not)."""
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def is_finite_number(x: Any) -> bool:
    """Whether ``x`` is a finite real number that is not a bool (what :func:`number` accepts before its range)."""
    return _is_number(x) and _finite(x)


def integer(x: Any, where: str, lo: int | None = None, hi: int | None = None, why: str = "", fix: str = "",
            unit: str = "") -> int:
    """``x`` as an int when it is an integer (not a bool, not a float: 2.0 is refused) in ``lo .. hi``
    (either bound may be None), else a ConfigError naming ``where``."""
    import numbers

    if not isinstance(x, numbers.Integral) or isinstance(x, bool) or type(x).__name__ == "bool_":
        rng = _range(lo, hi, False, unit)
        raise _fail(where, f"must be an integer{f' {_in(rng)}' if rng else ''}, got {shown(x)}", why, fix)
    x = int(x)
    _in_range(x, where, lo, hi, False, unit, why, fix)
    return x


def _in(rng: str) -> str:
    return rng if rng[0] in "<>" else f"in {rng}"


def number(x: Any, where: str, lo: float | None = None, hi: float | None = None, why: str = "", fix: str = "",
           unit: str = "", lo_open: bool = False) -> float:
    """``x`` as a float when it is a finite number (not a bool; ints accepted) with ``lo <= x <= hi`` (``lo < x``
    with ``lo_open``), else a ConfigError naming ``where``, the range and ``unit``."""
    if not is_finite_number(x):
        rng = _range(lo, hi, lo_open, unit)
        raise _fail(where, f"must be a finite number{f' {_in(rng)}' if rng else ''}, got {shown(x)}", why, fix)
    v = float(x)
    _in_range(v if not isinstance(x, int) else x, where, lo, hi, lo_open, unit, why, fix)
    return v


def vector(x: Any, where: str, n: int, why: str = "", fix: str = "") -> tuple[float, ...]:
    """``x`` (a list, tuple or 1-D array) as a tuple of ``n`` finite floats, else a ConfigError naming ``where``."""
    items = x.reshape(-1).tolist() if hasattr(x, "reshape") and hasattr(x, "tolist") else x
    ok = isinstance(items, (list, tuple)) and len(items) == n and all(
        is_finite_number(v) for v in items)
    if not ok:
        raise _fail(where, f"must be {n} finite numbers, got {shown(x)}", why, fix)
    return tuple(float(v) for v in items)


def choice(x: Any, where: str, choices: Collection | Callable[[], Collection], noun: str = "value") -> Any:
    """``x`` when it is one of ``choices`` (a collection or a zero-argument callable returning one), else a
    ConfigError listing them."""
    options = choices() if callable(choices) else choices
    try:
        known = x in options
    except TypeError:  # unhashable (a list where a name belongs)
        known = False
    if not known:
        raise _fail(where, f"unknown {noun} {x!r}", fix=f"choose from {', '.join(map(str, options))}")
    return x


def flag(x: Any, where: str, fix: str = "") -> bool:
    """``x`` when it is a bool (YAML null, "", "yes", 0 and 1 are refused: a doubtful switch is never guessed)."""
    if not isinstance(x, bool):
        raise _fail(where, f"must be true or false, got {x!r}", fix=fix)
    return x


def string(x: Any, where: str, empty: bool = False, fix: str = "") -> str:
    """``x`` when it is a string, non-empty (not only blanks) unless ``empty``; else a ConfigError."""
    if not isinstance(x, str) or (not empty and not x.strip()):
        raise _fail(where, f"must be a{'' if empty else ' non-empty'} string, got {shown(x)}", fix=fix)
    return x


def strings(x: Any, where: str, empty: bool = False, fix: str = "") -> tuple[str, ...]:
    """``x`` as a tuple when it is a list (or tuple) of non-empty strings, non-empty itself unless ``empty``; a single
    string is refused (its characters are not a list of names). Else a ConfigError naming ``where``."""
    if isinstance(x, (list, tuple)) and (x or empty) and all(isinstance(v, str) and v.strip() for v in x):
        return tuple(x)
    got = shown(x)
    raise _fail(where, f"must be a{'' if empty else ' non-empty'} list of non-empty strings, got "
                       f"{got if len(got) <= 120 else got[:117] + '...'}", fix=fix)


#: longest file-name component made from outside data (characters; most file systems allow 255 bytes)
MAX_COMPONENT = 120


def file_component(x: Any, where: str, fix: str = "") -> str:
    """``str(x)`` when it can be used as one file-name component inside its folder: non-empty, at most
    :data:`MAX_COMPONENT` characters, no ``/`` or ``\\``, not ``.`` or ``..``, no NUL or other control character.
    A ConfigError naming ``where`` otherwise (never rewritten silently: two ids must not become one file)."""
    s = str(x)
    bad = ("is empty" if not s.strip() else f"is {len(s)} characters, over {MAX_COMPONENT}" if len(s) > MAX_COMPONENT
           else "holds a path separator" if "/" in s or "\\" in s else "is . or .." if s in (".", "..")
           else "holds a control character" if any(ord(c) < 32 or ord(c) == 127 for c in s) else None)
    if bad:
        raise _fail(where, f"{s[:60]!r} {bad}, so it cannot name a file inside its folder",
                    fix=fix or "give records ids of letters, digits, '-', '_' and '.'")
    return s


def port(x: Any, where: str) -> int:
    """A TCP port to listen on or connect to: an integer in 1..65535."""
    return integer(x, where, 1, MAX_PORT, why="a TCP port")


def seed(x: Any, where: str, hi: int = MAX_SEED, why: str = "") -> int:
    """A random seed: an integer in 0..``hi`` (default :data:`MAX_SEED`, 2**63-1)."""
    return integer(x, where, 0, hi, why=why)


def mib(x: Any, where: str, hi: float) -> float:
    """A size in MiB: a finite number in (0, ``hi``]."""
    return number(x, where, 0, hi, unit="MiB", lo_open=True)

