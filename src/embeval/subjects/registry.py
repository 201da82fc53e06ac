"""The subject registry and the YAML subject spec: users add a model without writing code.

A subject spec (YAML or dict)::

    id: qwen-vl-local          # optional; default: the YAML file's stem, else "<adapter>:<path|url>", else the adapter's
    kind: vlm                  # vlm | policy | llm
    adapter: openai            # a registered adapter name (``embeval subjects list``)
    url: http://127.0.0.1:8000/v1   # for server adapters  (exactly one of url / path as the adapter needs)
    path: ~/models/qwen2.5-vl  # local weights; a relative path is taken from the YAML's folder when it
                               # exists there, else as written (cwd, or a name the adapter knows)
    params: {model: Qwen/Qwen2.5-VL-3B-Instruct, temperature: 0}   # adapter keyword arguments
    cache: ~/.cache/embeval/llm_cache.sqlite   # optional (llm/vlm): persistent call cache
    serve: {cameras: {full_image: third_person, wrist_image: wrist}, limits: {max_body_mb: 32}}
                               # optional: how `embeval serve` exposes it (embeval.serving.runner.app_from_spec)

An adapter is a class (or factory) registered under ``(kind, name)``; :func:`load_subject` calls it
with keyword arguments ``id=``, ``path=``/``url=`` when given, and ``**params``, after checking the
names against its signature, so a typo in the YAML is a :class:`ConfigError` naming the field.

Built-in adapters are registered lazily (``"module:attribute"``) so heavy packages (torch,
transformers, lerobot, llama_cpp) load only when a subject that needs them is loaded.
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from embeval.config import check_keys, finite_numbers
from embeval.errors import ConfigError, load_yaml
from embeval.registry import Registry
from embeval.subjects.protocols import LLM, VLM, Policy

KINDS = ("vlm", "policy", "llm")
_PROTOCOLS = {"vlm": VLM, "policy": Policy, "llm": LLM}
_SPEC_FIELDS = ("id", "kind", "adapter", "path", "url", "params", "cache", "description", "serve")

#: (kind, adapter name) -> "module:attribute" of the built-in adapters (imported on first use)
_BUILTIN: dict[tuple[str, str], str] = {
    ("llm", "openai"): "embeval.subjects.adapters.openai_chat:OpenAIChatLLM",
    ("vlm", "openai"): "embeval.subjects.adapters.openai_chat:OpenAIChatVLM",
    ("llm", "scripted"): "embeval.subjects.scripted:ScriptedLLM",
    ("vlm", "scripted"): "embeval.subjects.scripted:ScriptedVLM",
    ("policy", "scripted"): "embeval.subjects.scripted:ConstantPolicy",
    ("policy", "image_stats"): "embeval.subjects.scripted:ImageStatsPolicy",
    ("policy", "sequence"): "embeval.subjects.scripted:SequencePolicy",
    ("llm", "llama_cpp"): "embeval.subjects.adapters.llama_cpp:LlamaCppLLM",
    ("policy", "openvla_rest"): "embeval.subjects.adapters.openvla_rest:OpenVLARestPolicy",
    ("policy", "vla-eval"): "embeval.subjects.adapters.vla_eval_client:VlaEvalPolicy",
    ("policy", "openpi"): "embeval.subjects.adapters.openpi_client:OpenPiPolicy",
    ("policy", "openvla_hf"): "embeval.subjects.adapters.openvla_hf:OpenVLAHFPolicy",
    ("vlm", "hf"): "embeval.subjects.adapters.hf_vlm:HFVLM",
    ("policy", "lerobot"): "embeval.subjects.adapters.lerobot_policy:LeRobotPolicy",
    ("policy", "lerobot-server"): "embeval.subjects.adapters.lerobot_server:LeRobotServerPolicy",
    ("policy", "embedded"): "embeval.subjects.embedded.adapter:EmbeddedPolicy",
    ("vlm", "embedded"): "embeval.subjects.embedded.adapter:EmbeddedVLM",
}

#: one :class:`~embeval.registry.Registry` of adapters per kind; a package adds one through the entry-point
#: group ``embeval.subject_adapters.<kind>`` (e.g. ``my_vla = "my_pkg.adapter:MyPolicy"`` in ``...policy``)
ADAPTERS: dict[str, Registry] = {
    kind: Registry(f"{kind} adapter", group=f"embeval.subject_adapters.{kind}",
                   hint="register one with embeval.subjects.register_adapter",
                   entries={n: t for (k, n), t in _BUILTIN.items() if k == kind})
    for kind in KINDS
}


def register_adapter(name: str, kind: str | tuple[str, ...], target: Any = None, description: str = ""):
    """Register an adapter under ``name`` for one or more kinds.

    Use as a decorator on a class/factory (``@register_adapter("tiny_vla", "policy")``), or pass
    ``target`` directly: the object or a lazy ``"module:attribute"`` string. Re-registering a name
    replaces it (so a user can override a built-in).
    """
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    for k in kinds:
        if k not in KINDS:
            raise ConfigError(f"register_adapter({name!r}): kind {k!r} is not one of {', '.join(KINDS)}")

    def deco(obj):
        for k in kinds:
            ADAPTERS[k].register(name, obj, description=description)
        return obj

    if target is not None:
        return deco(target)
    return deco


def list_adapters() -> list[tuple[str, str, str]]:
    """``(kind, name, description)`` for every registered adapter (entry-point plugins included), sorted;
    imports nothing heavy."""
    return sorted((kind, name, desc) for kind, reg in ADAPTERS.items() for name, desc in reg.describe())


def resolve_adapter(kind: str, name: str) -> Callable[..., Any]:
    """The adapter object for ``(kind, name)``; imports it if registered lazily."""
    reg = ADAPTERS.get(kind)
    if reg is None or name not in reg:
        same_kind = sorted(reg.names()) if reg is not None else []
        other = sorted(k for k, r in ADAPTERS.items() if name in r)
        hint = f" (adapter {name!r} exists for kind {', '.join(other)})" if other else ""
        raise ConfigError(
            f"field 'adapter': unknown adapter {name!r} for kind {kind!r}{hint}; "
            f"choose from {', '.join(same_kind) or '(none)'} or register one with "
            "embeval.subjects.register_adapter"
        )
    return reg.get(name, "field 'adapter'")


@dataclass
class SubjectSpec:
    """A parsed subject spec (see module docstring); ``path`` is absolute after parsing."""

    kind: str
    adapter: str
    id: str = ""
    path: str | None = None
    url: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    cache: str | None = None
    description: str = ""
    serve: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], base_dir: Path | None = None, default_id: str = "") -> "SubjectSpec":
        """Validate a mapping; raise :class:`ConfigError` naming the offending field."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a subject spec must be a mapping with fields kind, adapter, ...; got {type(data).__name__}")
        check_keys(data, _SPEC_FIELDS, "subject", note="adapter arguments go under 'params'")
        for req in ("kind", "adapter"):
            if not data.get(req):
                raise ConfigError(f"field {req!r} is missing from the subject spec (kind: one of {', '.join(KINDS)})")
        kind = str(data["kind"]).strip().lower()
        if kind not in KINDS:
            raise ConfigError(f"field 'kind': {data['kind']!r} is not one of {', '.join(KINDS)}")
        params = data.get("params") or {}
        if not isinstance(params, Mapping):
            raise ConfigError(f"field 'params' must be a mapping of adapter arguments, got {type(params).__name__}")
        finite_numbers(params, "params")  # `seed: .nan` would reach the adapter (and a seeded generator) as is
        for key in ("path", "url", "cache", "id", "description"):
            if data.get(key) is not None and not isinstance(data[key], (str, os.PathLike)):
                raise ConfigError(f"field {key!r} must be a string, got {type(data[key]).__name__}")
        serve = data.get("serve") or {}
        if not isinstance(serve, Mapping):
            raise ConfigError(f"field 'serve' must be a mapping (cameras, state, gripper, limits), got {type(serve).__name__}")
        finite_numbers(serve, "serve")
        path = _resolve_path(data.get("path"), base_dir)
        url = os.path.expandvars(str(data["url"])) if data.get("url") else None
        cache = _resolve_path(data.get("cache"), base_dir)
        sid = str(data.get("id") or default_id or (f"{data['adapter']}:{Path(path).name if path else url}" if path or url else ""))
        return cls(kind=kind, adapter=str(data["adapter"]), id=sid, path=path, url=url, params=dict(params),
                   cache=cache, description=str(data.get("description") or ""), serve=dict(serve))

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "", {})}


def _resolve_path(value: Any, base_dir: Path | None) -> str | None:
    if value in (None, ""):
        return None
    p = Path(os.path.expanduser(os.path.expandvars(str(value))))
    if not p.is_absolute() and base_dir is not None and (base_dir / p).exists():
        p = base_dir / p  # relative to the spec file when it exists there; else as written (cwd, or a name)
    return str(p)


def read_spec(spec_or_path: SubjectSpec | Mapping[str, Any] | str | os.PathLike) -> SubjectSpec:
    """Parse a spec from a :class:`SubjectSpec`, a mapping, or a YAML file path."""
    if isinstance(spec_or_path, SubjectSpec):
        return spec_or_path
    if isinstance(spec_or_path, Mapping):
        return SubjectSpec.from_mapping(spec_or_path)
    path = Path(os.path.expanduser(str(spec_or_path)))
    data = load_yaml(path, "subject spec", missing=f"subject spec {path} does not exist; see config/subjects/*.yaml for examples")
    try:
        return SubjectSpec.from_mapping(data or {}, base_dir=path.parent.resolve(), default_id=path.stem)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def adapter_kwargs(factory: Callable[..., Any], spec: SubjectSpec) -> dict[str, Any]:
    """Keyword arguments for ``factory`` from ``spec``; :class:`ConfigError` on unknown/missing names."""
    kwargs: dict[str, Any] = {"id": spec.id} if spec.id else {}  # no id: the adapter's default
    if spec.path is not None:
        kwargs["path"] = spec.path
    if spec.url is not None:
        kwargs["url"] = spec.url
    clash = sorted(set(spec.params) & {"id", "path", "url"})
    if clash:
        raise ConfigError(f"field 'params' must not contain {', '.join(clash)}: give them as top-level fields")
    kwargs.update(spec.params)
    sig = inspect.signature(factory)
    params = sig.parameters
    if "id" not in kwargs and "id" in params and params["id"].default is params["id"].empty:
        kwargs["id"] = spec.adapter  # the adapter has no default id of its own
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        accepted = [n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and n != "self"]
        for name in kwargs:
            if name not in params:
                where = f"field {name!r}" if name in ("path", "url") else f"field 'params.{name}'"
                raise ConfigError(
                    f"{where}: adapter {spec.adapter!r} ({spec.kind}) does not accept {name!r}; "
                    f"accepted: {', '.join(a for a in accepted if a != 'id')}"
                )
    for name, p in params.items():
        if p.default is p.empty and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name not in kwargs and name != "self":
            where = f"field {name!r}" if name in ("path", "url") else f"field 'params.{name}'"
            raise ConfigError(f"{where} is required by adapter {spec.adapter!r} ({spec.kind})")
    return kwargs


def load_subject(spec_or_path: SubjectSpec | Mapping[str, Any] | str | os.PathLike,
                 params: Mapping[str, Any] | None = None, **overrides: Any):
    """Build the subject a spec describes (a VLM, Policy or LLM); ``params`` and ``overrides``
    (keyword arguments) update the spec's ``params``.

    Raises :class:`ConfigError` (malformed spec, naming the field), :class:`MissingWeightsError`
    (local weights absent) or :class:`ServerUnavailableError` (adapters that check their server).
    """
    spec = read_spec(spec_or_path)
    overrides = {**(params or {}), **overrides}
    if overrides:
        spec = SubjectSpec(**{**spec.__dict__, "params": {**spec.params, **overrides}})
    factory = resolve_adapter(spec.kind, spec.adapter)
    from embeval.subjects.model_files import check_subject

    check_subject(spec.adapter, spec.path, spec.params)  # code a model folder names: refused before anything loads
    subject = factory(**adapter_kwargs(factory, spec))
    proto = _PROTOCOLS[spec.kind]
    if not isinstance(subject, proto):
        raise ConfigError(
            f"adapter {spec.adapter!r} built a {type(subject).__name__}, which does not implement the "
            f"{proto.__name__} protocol required by kind {spec.kind!r}"
        )
    if spec.cache:
        if spec.kind == "policy":
            raise ConfigError("field 'cache' applies to llm and vlm subjects only (policies are stateful)")
        from embeval.subjects.cache import CachedLLM, CachedVLM

        subject = (CachedLLM if spec.kind == "llm" else CachedVLM)(subject, spec.cache)
    return subject
