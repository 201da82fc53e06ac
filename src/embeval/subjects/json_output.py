"""JSON-schema helpers for structured model output: validate a reply, build a valid instance."""
from __future__ import annotations

import json
import random
from typing import Any, Mapping

from embeval.errors import InvalidInputError


def parse_and_validate(text: str, schema: Mapping[str, Any], source: str = "model") -> Any:
    """Parse ``text`` as JSON and validate it against ``schema``; :class:`InvalidInputError` otherwise."""
    import jsonschema

    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise InvalidInputError(f"{source} returned text that is not JSON ({exc}): {str(text)[:200]!r}") from None
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        raise InvalidInputError(f"{source} returned JSON that does not match the schema: {exc.message}") from None
    return value


def _resolve_ref(node: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if not ref:
        return node
    if not ref.startswith("#/"):
        raise InvalidInputError(f"only local $ref are supported in output schemas, got {ref!r}")
    target: Any = root
    for part in ref[2:].split("/"):
        target = target[part]
    return target


def example_from_schema(schema: Mapping[str, Any], seed: int = 0, root: Mapping[str, Any] | None = None) -> Any:
    """A deterministic instance valid against ``schema`` (the common subset: object, array, string,
    number, integer, boolean, null, enum, const, anyOf/oneOf/allOf, local $ref; string formats and
    patterns are not synthesised). Different seeds give different instances where the schema allows.
    """
    rng = random.Random(seed)
    return _example(schema, rng, root if root is not None else schema)


def _example(node: Mapping[str, Any], rng: random.Random, root: Mapping[str, Any]) -> Any:
    node = _resolve_ref(node, root)
    if "const" in node:
        return node["const"]
    if "enum" in node:
        return rng.choice(list(node["enum"]))
    for key in ("anyOf", "oneOf"):
        if key in node:
            return _example(node[key][0], rng, root)
    if "allOf" in node:
        merged: dict[str, Any] = {}
        for sub in node["allOf"]:
            sub = _resolve_ref(sub, root)
            for k, v in sub.items():
                if k in ("properties",) and k in merged:
                    merged[k] = {**merged[k], **v}
                elif k == "required" and k in merged:
                    merged[k] = list(merged[k]) + list(v)
                else:
                    merged[k] = v
        return _example(merged, rng, root)
    typ = node.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), typ[0] if typ else None)
    if typ is None:
        typ = "object" if "properties" in node else "string"
    if typ == "object":
        props = node.get("properties", {})
        out = {}
        for name, sub in props.items():
            out[name] = _example(sub, rng, root)
        return out
    if typ == "array":
        items = node.get("items", {"type": "string"})
        lo = int(node.get("minItems", 1))
        hi = int(node.get("maxItems", max(lo, 3)))
        n = rng.randint(lo, max(lo, min(hi, lo + 2)))
        vals = [_example(items, rng, root) for _ in range(n)]
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
