"""JSON-schema helpers for structured model output: check a schema a client sent, validate a reply,
build a valid instance.

:func:`check_output_schema` is what a server runs on a client's schema before any model sees it: the
schema must pass its JSON Schema meta-schema, be at most :data:`MAX_SCHEMA_BYTES` long, hold at most
:data:`MAX_SCHEMA_NODES` objects and be :data:`MAX_SCHEMA_DEPTH` subschemas deep (each ``$ref`` counts), use only local, non-recursive
``$ref``, hold only finite numbers of at most :data:`MAX_SCHEMA_NUMBER`, and make a model emit at most
:data:`MAX_SCHEMA_OUTPUT` characters (``minLength``, ``minItems``, ``minProperties``, patterns and nested
arrays multiply). Every refusal is an :class:`InvalidInputError` naming the place (``$.properties.a``).
"""
from __future__ import annotations

import json
import math
import random
import re
from collections import OrderedDict
from typing import Any, Mapping
from urllib.parse import unquote

from embeval.errors import InvalidInputError

#: longest accepted schema, as compact JSON (characters)
MAX_SCHEMA_BYTES = 32 * 1024
#: most objects (subschemas and the like) in an accepted schema: checking one against the 2020-12
#: meta-schema costs about 0.3 ms each, so this bounds a check to about 0.15 s
MAX_SCHEMA_NODES = 512
#: deepest accepted nesting of subschemas, each ``$ref`` followed counting one level
MAX_SCHEMA_DEPTH = 32
#: most characters a schema may make a model emit (its bound on the smallest valid instance, and on
#: what :func:`example_from_schema` builds)
MAX_SCHEMA_OUTPUT = 64 * 1024
#: largest magnitude of a number in a schema keyword (2**53: integers stay exact as floats)
MAX_SCHEMA_NUMBER = 2 ** 53

#: keywords holding one subschema / a name -> subschema map / a list of subschemas
_ONE = ("additionalProperties", "propertyNames", "additionalItems", "contains", "not", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
            "minItems", "maxItems", "minProperties", "maxProperties", "minContains", "maxContains")
_ANY = 42  # characters of the instance a schema with no constraint gets (a short string)
_CHECKED: OrderedDict[tuple, int] = OrderedDict()  # a few recently checked schemas: clients resend the same one
_CHECKED_KEEP = 64


#: seconds all the schema patterns of one validation may take together (``regex`` with a timeout; it lets go of the
#: GIL while it matches, so a server's other requests are answered meanwhile)
PATTERN_BUDGET_S = 0.5
#: longest string (characters) a schema pattern is matched against
MAX_PATTERN_SUBJECT = MAX_SCHEMA_OUTPUT


class _BoundedSearch:
    """``search(pattern, text)`` for schema keywords: the ``regex`` engine (Python's syntax) with one shared deadline,
    strings of at most :data:`MAX_PATTERN_SUBJECT` characters; :class:`InvalidInputError` past either bound."""

    def __init__(self, source: str, budget_s: float = PATTERN_BUDGET_S):
        import time

        self.source, self.clock, self.budget = source, time.monotonic, budget_s
        self.deadline = self.clock() + budget_s

    def __call__(self, pattern: str, text: str):
        import regex

        if len(text) > MAX_PATTERN_SUBJECT:
            raise InvalidInputError(f"{self.source} returned a string of {len(text)} characters to match against the "
                                    f"schema pattern {pattern[:60]!r}, over the limit of {MAX_PATTERN_SUBJECT}")
        try:
            return regex.search(pattern, text, timeout=max(self.deadline - self.clock(), 1e-3), concurrent=True)
        except TimeoutError:
            raise InvalidInputError(f"the schema pattern {pattern[:60]!r} took over {self.budget:g} s to match "
                                    f"{self.source}'s output (its repetitions backtrack); simplify the pattern") from None
        except regex.error as exc:
            raise InvalidInputError(f"the schema pattern {pattern[:60]!r} is not a usable regular expression ({exc})") from None


def bounded_validator(schema: Mapping[str, Any], source: str = "model"):
    """A jsonschema validator for ``schema`` whose ``pattern``, ``patternProperties`` and ``additionalProperties``
    match with :class:`_BoundedSearch` (one time budget for the whole validation); ``unevaluatedProperties`` beside
    ``patternProperties`` (matched by jsonschema itself, unbounded) is refused."""
    from jsonschema import ValidationError, validators

    if "patternProperties" in json.dumps(schema) and "unevaluatedProperties" in json.dumps(schema):
        raise InvalidInputError("the schema combines unevaluatedProperties with patternProperties, which this server "
                                "cannot match in bounded time; use additionalProperties")
    search = _BoundedSearch(source)

    def pattern(validator, patrn, instance, _schema):
        if validator.is_type(instance, "string") and not search(patrn, instance):
            yield ValidationError(f"{instance[:80]!r} does not match {patrn[:80]!r}")

    def pattern_properties(validator, pats, instance, _schema):
        if validator.is_type(instance, "object"):
            for pat, sub in pats.items():
                for k, v in instance.items():
                    if search(pat, k):
                        yield from validator.descend(v, sub, path=k, schema_path=pat)

    def additional_properties(validator, ap, instance, sch):
        if not validator.is_type(instance, "object"):
            return
        pats, props = list(sch.get("patternProperties", {})), sch.get("properties", {})
        extras = sorted(k for k in instance if k not in props and not any(search(p, k) for p in pats))
        if validator.is_type(ap, "object"):
            for k in extras:
                yield from validator.descend(instance[k], ap, path=k)
        elif not ap and extras:
            yield ValidationError(f"Additional properties are not allowed ({', '.join(repr(k[:40]) for k in extras[:5])} "
                                  "unexpected)")

    base = validators.validator_for(schema)
    base.check_schema(schema)  # jsonschema.SchemaError, as jsonschema.validate raises
    cls = validators.extend(base, {"pattern": pattern, "patternProperties": pattern_properties,
                                   "additionalProperties": additional_properties})
    return cls(schema)


def parse_and_validate(text: str, schema: Mapping[str, Any], source: str = "model") -> Any:
    """Parse ``text`` as JSON and validate it against ``schema`` (patterns bounded: :func:`bounded_validator`);
    :class:`InvalidInputError` otherwise."""
    import jsonschema

    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise InvalidInputError(f"{source} returned text that is not JSON ({exc}): {str(text)[:200]!r}") from None
    try:
        error = jsonschema.exceptions.best_match(bounded_validator(schema, source).iter_errors(value))
        if error is not None:
            raise error
    except jsonschema.ValidationError as exc:
        raise InvalidInputError(f"{source} returned JSON that does not match the schema: {exc.message}") from None
    return value


def _short(where: str) -> str:
    """A place in a schema, its middle cut when long (a long $ref chain)."""
    return where if len(where) <= 100 else where[:40] + "..." + where[-57:]


def _count_objects(value: Any, limit: int) -> int:
    """Objects in the JSON value ``value``, counted up to just past ``limit``."""
    n, stack = 0, [value]
    while stack and n <= limit:
        v = stack.pop()
        if isinstance(v, Mapping):
            n += 1
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n


def _non_finite(value: Any, where: str = "$") -> str | None:
    """The place of the first infinite or NaN number in ``value`` (a 1e999 in the JSON text), else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _non_finite(v, _where(where, k) if isinstance(k, str) else f"{where}[{k}]")
        if found:
            return found
    return None


def _where(path: str, key: Any) -> str:
    return f"{path}.{key}" if isinstance(key, str) and re.fullmatch(r"[A-Za-z_$][\w$-]*", key) else f"{path}[{json.dumps(key)}]"


def resolve_ref(ref: Any, root: Any, where: str = "$") -> Any:
    """The subschema a local ``$ref`` (``#`` or a JSON pointer ``#/$defs/name``) points to in ``root``;
    :class:`InvalidInputError` for a non-string, remote or anchor reference and for one that points to nothing."""
    if not isinstance(ref, str):
        raise InvalidInputError(f"{where}.$ref must be a string such as '#/$defs/name', got {json.dumps(ref)[:40]}")
    if ref != "#" and not ref.startswith("#/"):
        raise InvalidInputError(f"{where}.$ref {ref[:80]!r} is not supported: only references into this schema, "
                                "such as '#/$defs/name'")
    target: Any = root
    for raw in ref[2:].split("/") if ref != "#" else []:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(target, Mapping) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            raise InvalidInputError(f"{where}.$ref {ref[:80]!r} points to nothing in the schema (no {part[:40]!r}); "
                                    "define it, e.g. under $defs")
    if not isinstance(target, (Mapping, bool)):
        raise InvalidInputError(f"{where}.$ref {ref[:80]!r} points to a {type(target).__name__}, not a schema")
    return target


def _pattern_width(pattern: str, where: str) -> int:
    """Fewest characters ``pattern`` matches; :class:`InvalidInputError` when it nests variable repetition
    (``(a+)+``, ``(\\w+\\s?)*``): Python's regex engine can take exponential time to match those."""
    try:
        import re._parser as sre_parse  # Python >= 3.11
    except ImportError:  # pragma: no cover
        import sre_parse  # type: ignore[no-redef]

    def height(sub) -> int:
        h = 0
        for op, av in sub:
            name = str(op)
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                lo, hi, inner = av
                h = max(h, height(inner) + (lo != hi))
            elif name == "SUBPATTERN":
                h = max(h, height(av[3]))
            elif name == "BRANCH":
                h = max([h] + [height(b) for b in av[1]])
            elif name == "ATOMIC_GROUP":
                h = max(h, height(av))
            elif name in ("ASSERT", "ASSERT_NOT"):
                h = max(h, height(av[1]))
            elif name == "GROUPREF_EXISTS":
                h = max([h] + [height(b) for b in av[1:] if b is not None])
        return h

    try:
        tree = sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:  # OverflowError: "a{99999999999}"
        raise InvalidInputError(f"{where}: {pattern[:80]!r} is not a usable regular expression ({exc})") from None
    if height(tree) > 1:
        raise InvalidInputError(f"{where}: {pattern[:80]!r} repeats a group that itself repeats a variable number of "
                                "times (like (a+)+), which can take exponential time to match; use one level of repetition")
    return int(tree.getwidth()[0])


class _Bound:
    """One pass over a schema: checks the ``$ref`` graph (local, resolvable, acyclic), depth, numbers and
    patterns, and bounds the characters of the instance a model must or may be made to emit. Each subschema
    is visited once (memoised by identity), so a ``$ref`` fan-out costs its size, not its expansion."""

    def __init__(self, root: Any, max_depth: int, max_output: int):
        self.root, self.max_depth, self.max_output = root, max_depth, max_output
        self.memo: dict[int, tuple[int, int]] = {}  # id(node) -> (characters, height in subschemas)
        self.active: set[int] = set()

    def at(self, node: Any, where: str, depth: int) -> tuple[int, int]:
        if depth > self.max_depth:
            raise InvalidInputError(f"{_short(where)}: the schema nests subschemas deeper than {self.max_depth} levels "
                                    "(each $ref followed counts one); flatten it")
        if isinstance(node, bool):
            return (_ANY if node else 0), 0
        if not isinstance(node, Mapping):  # the meta-schema check runs first; this guards library callers
            raise InvalidInputError(f"{where}: a subschema must be an object or a boolean, got {type(node).__name__}")
        key = id(node)
        if key in self.active:
            raise InvalidInputError(f"{_short(where)}: the schema refers to itself ($ref back to an enclosing schema); a "
                                    "recursive schema has no bound on its output: write the nesting out")
        if key in self.memo:
            size, h = self.memo[key]
            if depth + h > self.max_depth:
                raise InvalidInputError(f"{_short(where)}: the schema nests subschemas deeper than {self.max_depth} levels "
                                        "(each $ref followed counts one); flatten it")
            return size, h
        self.active.add(key)
        try:
            out = self._node(node, where, depth)
        finally:
            self.active.discard(key)
        self.memo[key] = out
        if out[0] > self.max_output:
            raise InvalidInputError(f"{_short(where)}: the schema can make the model emit about {out[0]} characters, over the "
                                    f"limit of {self.max_output}; lower minLength/minItems/minProperties there (nested "
                                    "arrays multiply)")
        return out

    def _node(self, node: Mapping[str, Any], where: str, depth: int) -> tuple[int, int]:
        heights = [0]

        def sub(child: Any, w: str) -> int:
            s, h = self.at(child, w, depth + 1)
            heights.append(h + 1)
            return s

        for k in _NUMBERS:
            v = node.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not abs(v) <= MAX_SCHEMA_NUMBER:
                raise InvalidInputError(f"{_where(where, k)}: {v!r:.40} is out of range; numbers in a schema must be "
                                        f"finite and at most {MAX_SCHEMA_NUMBER} in magnitude")
        for k in ("$dynamicRef", "$recursiveRef"):
            if k in node:
                raise InvalidInputError(f"{_where(where, k)} is not supported; use a local $ref such as '#/$defs/name'")
        if depth and ("$id" in node or isinstance(node.get("id"), str)):
            raise InvalidInputError(f"{where}: $id is only supported at the schema's root (it changes what $ref means)")
        if "enum" in node and isinstance(node["enum"], list) and not node["enum"]:
            raise InvalidInputError(f"{where}.enum is empty, so no value is valid; list at least one value")
        patmin = 0
        if isinstance(node.get("pattern"), str):
            patmin = _pattern_width(node["pattern"], _where(where, "pattern"))
        for p in node.get("patternProperties") or {}:
            _pattern_width(p, _where(_where(where, "patternProperties"), p))
        one = {k: sub(node[k], _where(where, k)) for k in _ONE if k in node}
        maps = {k: {n: sub(s, _where(_where(where, k), n)) for n, s in node[k].items()}
                for k in _MAPS if isinstance(node.get(k), Mapping)}
        lists = {k: [sub(s, f"{_where(where, k)}[{i}]") for i, s in enumerate(node[k])]
                 for k in _LISTS if isinstance(node.get(k), list)}
        items = node.get("items")
        if isinstance(items, list):  # drafts before 2020-12: a list of items is prefixItems
            lists["prefixItems"] = lists.get("prefixItems", []) + [sub(s, f"{where}.items[{i}]") for i, s in enumerate(items)]
            item_size = one.get("additionalItems", _ANY)
        else:
            item_size = sub(items, _where(where, "items")) if items is not None else _ANY
        for name, dep in (node.get("dependencies") or {}).items() if isinstance(node.get("dependencies"), Mapping) else ():
            if isinstance(dep, (Mapping, bool)):
                sub(dep, _where(_where(where, "dependencies"), name))
        ref = sub(resolve_ref(node["$ref"], self.root, where), _where(where, "$ref")) if "$ref" in node else 0

        combined = ref + sum(lists.get("allOf", [])) + max(lists.get("anyOf", [0])) + max(lists.get("oneOf", [0]))
        if "const" in node:
            own = len(json.dumps(node["const"]))
        elif isinstance(node.get("enum"), list):
            own = max(len(json.dumps(v)) for v in node["enum"])
        else:
            typ = node.get("type")
            if isinstance(typ, str):
                types = [typ]
            elif isinstance(typ, list):
                types = [t for t in typ if isinstance(t, str)]
            elif any(k in node for k in ("properties", "required", "minProperties")):
                types = ["object"]
            elif any(k in node for k in ("items", "prefixItems", "minItems", "contains")):
                types = ["array"]
            elif combined or "not" in node:
                types = []
            else:
                types = ["string"]
            own = max((self._type_size(t, node, one, maps, lists, item_size, patmin) for t in types), default=0)
        return own + combined, max(heights)

    @staticmethod
    def _type_size(typ: str, node: Mapping[str, Any], one: dict, maps: dict, lists: dict, item_size: int,
                   patmin: int) -> int:
        def count(k: str, default: int = 0) -> int:
            v = node.get(k, default)
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default

        if typ == "object":
            props = maps.get("properties", {})
            size = 2 + sum(len(json.dumps(n)) + 2 + s for n, s in props.items())
            required = [r for r in node.get("required") or [] if isinstance(r, str) and r not in props]
            size += sum(len(json.dumps(r)) + 2 + _ANY for r in required)
            extra = max(0, count("minProperties") - len(props) - len(required))
            return size + extra * (12 + one.get("additionalProperties", _ANY))
        if typ == "array":
            lo = count("minItems", 1)
            n = lo + 2  # the scripted generator makes minItems..minItems+2 items
            if "maxItems" in node:
                n = max(lo, min(n, count("maxItems", n)))
            size = 2 + sum(s + 1 for s in lists.get("prefixItems", [])) + n * (item_size + 1)
            return size + (count("minContains", 1) * (one["contains"] + 1) if "contains" in one else 0)
        if typ == "string":
            return 2 + max(count("minLength"), patmin) + 40
        return {"number": 32, "integer": 32, "boolean": 5, "null": 4}.get(typ, _ANY)


def check_output_schema(schema: Any, max_bytes: int = MAX_SCHEMA_BYTES, max_depth: int = MAX_SCHEMA_DEPTH,
                        max_output: int = MAX_SCHEMA_OUTPUT, max_nodes: int = MAX_SCHEMA_NODES) -> int:
    """Check a JSON schema for structured output (module docstring) and return the bound (characters) on
    the instance it makes a model emit; :class:`InvalidInputError` naming the problem and its place
    otherwise. The last few schemas that passed are remembered, so a client resending one costs a lookup."""
    import jsonschema
    from jsonschema import validators

    if not isinstance(schema, Mapping):
        raise InvalidInputError(f"the schema must be a JSON object, got {type(schema).__name__}")
    try:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:  # 1e999 parses as inf
        raise InvalidInputError(f"{_non_finite(schema)}: a schema number must be finite (1e999 reads as infinity); "
                                f"use numbers of at most {MAX_SCHEMA_NUMBER} in magnitude") from None
    except (TypeError, RecursionError) as exc:  # a library caller's non-JSON values or self-containing dict
        raise InvalidInputError(f"the schema is not plain JSON ({type(exc).__name__}: {exc})") from None
    if len(text) > max_bytes:
        raise InvalidInputError(f"the schema is {len(text)} characters as compact JSON, over the limit of {max_bytes}; "
                                "send a smaller schema")
    if _count_objects(schema, max_nodes) > max_nodes:
        raise InvalidInputError(f"the schema holds more than {max_nodes} objects (subschemas), over the limit; "
                                "send a smaller schema")
    key = (text, max_depth, max_output, max_nodes)
    if key in _CHECKED:
        _CHECKED.move_to_end(key)
        return _CHECKED[key]
    meta = schema.get("$schema")
    if meta is None:
        cls = jsonschema.Draft202012Validator
    elif not isinstance(meta, str) or validators.validator_for(schema, default=None) is None:
        raise InvalidInputError(f"$.$schema {json.dumps(meta)[:80]} is not a JSON Schema draft this server knows; "
                                "leave it out (2020-12 is assumed) or name draft 7, 2019-09 or 2020-12")
    else:
        cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidInputError(f"{exc.json_path}: {exc.message[:200]} (the schema is not valid JSON Schema)") from None
    except (OverflowError, RecursionError, ValueError) as exc:  # e.g. a pattern "a{99999999999}"
        raise InvalidInputError(f"the schema cannot be checked ({type(exc).__name__}: {exc}); simplify it") from None
    size = _Bound(schema, max_depth, max_output).at(schema, "$", 0)[0]
    _CHECKED[key] = size
    while len(_CHECKED) > _CHECKED_KEEP:
        _CHECKED.popitem(last=False)
    return size


def example_from_schema(schema: Mapping[str, Any], seed: int = 0, root: Mapping[str, Any] | None = None) -> Any:
    """A deterministic instance valid against ``schema`` (the common subset: object, array, string,
    number, integer, boolean, null, enum, const, anyOf/oneOf/allOf, local $ref; string formats and
    patterns are not synthesised). Different seeds give different instances where the schema allows.
    The schema is checked first (:func:`check_output_schema`, default limits): a bad one is an
    :class:`InvalidInputError`, and the instance is at most :data:`MAX_SCHEMA_OUTPUT` characters.
    """
    root = root if root is not None else schema
    if root is schema:
        check_output_schema(schema)
    rng = random.Random(seed)
    return _example(schema, rng, root, 0)


def _example(node: Any, rng: random.Random, root: Mapping[str, Any], depth: int) -> Any:
    if depth > MAX_SCHEMA_DEPTH:  # only reachable for a root= given by the caller: check_output_schema bounds it
        raise InvalidInputError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels or refers to itself")
    if node is True:
        node = {}
    if node is False or not isinstance(node, Mapping):
        raise InvalidInputError(f"no value is valid against the schema {json.dumps(node)[:60]}")
    if "$ref" in node:
        node = resolve_ref(node["$ref"], root)
        return _example(node, rng, root, depth + 1)
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return rng.choice(list(node["enum"]))
    for key in ("anyOf", "oneOf"):
        if key in node:
            return _example(node[key][0], rng, root, depth + 1)
    if "allOf" in node:
        merged: dict[str, Any] = {}
        for sub in node["allOf"]:
            sub = resolve_ref(sub["$ref"], root) if isinstance(sub, Mapping) and "$ref" in sub else sub
            if sub is False:
                raise InvalidInputError("no value is valid against an allOf that holds false")
            for k, v in (sub.items() if isinstance(sub, Mapping) else ()):
                if k in ("properties",) and k in merged:
                    merged[k] = {**merged[k], **v}
                elif k == "required" and k in merged:
                    merged[k] = list(merged[k]) + list(v)
                else:
                    merged[k] = v
        return _example(merged, rng, root, depth + 1)
    typ = node.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), typ[0] if typ else None)
    if typ is None:
        typ = "object" if "properties" in node else "string"
    if typ == "object":
        props = node.get("properties", {})
        out = {}
        for name, sub in props.items():
            out[name] = _example(sub, rng, root, depth + 1)
        return out
    if typ == "array":
        items = node.get("items", {"type": "string"})
        if isinstance(items, list):  # drafts before 2020-12: one schema per position
            return [_example(sub, rng, root, depth + 1) for sub in items]
        lo = int(node.get("minItems", 1))
        hi = int(node.get("maxItems", max(lo, 3)))
        n = rng.randint(lo, max(lo, min(hi, lo + 2)))
        vals = [_example(items, rng, root, depth + 1) for _ in range(n)]
        if node.get("uniqueItems"):
            uniq = []
            for v in vals:
                if v not in uniq:
                    uniq.append(v)
            vals = uniq
        return vals
    if typ == "string":
        words = ["alpha", "beta", "gamma", "delta", "omega", "pick", "place", "cube", "red", "left"]
        lo = int(node.get("minLength", 1))
        hi = int(node.get("maxLength", max(lo, 24)))
        s = rng.choice(words)
        while len(s) < lo:
            s += " " + rng.choice(words)
        return s[:hi]
    if typ in ("number", "integer"):
        lo = node.get("minimum", node.get("exclusiveMinimum", 0))
        hi = node.get("maximum", node.get("exclusiveMaximum", lo + 10))
        if typ == "integer":
            lo_i = int(lo) + (1 if "exclusiveMinimum" in node and "minimum" not in node else 0)
            hi_i = int(hi) - (1 if "exclusiveMaximum" in node and "maximum" not in node else 0)
            return rng.randint(lo_i, max(lo_i, hi_i))
        v = round(rng.uniform(float(lo), float(hi)), 3)
        if ("exclusiveMinimum" in node and v <= lo) or ("exclusiveMaximum" in node and v >= hi):
            v = (float(lo) + float(hi)) / 2
        return v
    if typ == "boolean":
        return rng.random() < 0.5
    if typ == "null":
        return None
    raise InvalidInputError(f"cannot build an example for schema type {typ!r}")
