"""Save and load embedded models: a folder with ``config.json`` (architecture, normalisation,
training provenance) and ``model.safetensors`` (float32 weights). No pickle is ever loaded."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embeval.errors import ConfigError, MissingWeightsError, read_json

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_VERSION = 1


def save_checkpoint(path: str | Path, kind: str, config: dict[str, Any], state_dict: dict, extra: dict[str, Any]) -> Path:
    """Write ``config.json`` + ``model.safetensors`` under ``path`` (created); returns ``path``."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous().float() for k, v in state_dict.items()}
    save_file(tensors, str(path / WEIGHTS_NAME), metadata={"kind": kind})
    doc = {"format_version": FORMAT_VERSION, "kind": kind, "config": config, **extra}
    (path / CONFIG_NAME).write_text(json.dumps(doc, indent=1, sort_keys=True))
    return path


def load_checkpoint(path: str | Path, kind: str) -> tuple[dict[str, Any], dict]:
    """Read a checkpoint folder; returns (config document, state dict of torch tensors)."""
    from safetensors.torch import load_file

    path = Path(path)
    cfg_file, w_file = path / CONFIG_NAME, path / WEIGHTS_NAME
    if not cfg_file.exists() or not w_file.exists():
        raise MissingWeightsError(
            f"no embedded {kind} checkpoint at {path} (need {CONFIG_NAME} and {WEIGHTS_NAME}); "
            f"train one with `embeval train {kind}` or use a shipped name from `embeval train population --list`"
        )
    fix = f"point at a folder written by `embeval train {kind}` or copy the checkpoint again"
    doc = read_json(cfg_file, "checkpoint config", fix, max_bytes=4 << 20)
    if "kind" not in doc:
        raise ConfigError(f"checkpoint config {cfg_file} is not an embeval embedded-model config (no 'kind'); {fix}")
    if doc.get("kind") != kind:
        raise ConfigError(f"checkpoint {path} holds a {doc.get('kind')!r} model, expected {kind!r}")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"checkpoint {path} has format_version {doc.get('format_version')}, this code reads {FORMAT_VERSION}")
    try:
        return doc, load_file(str(w_file))
    except Exception as exc:  # safetensors' own error type: a torn or foreign weights file
        raise ConfigError(f"weights file {w_file} cannot be read ({type(exc).__name__}: {str(exc)[:200]}); copy the "
                          "checkpoint again or train it anew") from None


def checkpoint_family(path: str | Path, kind: str, default: str | None = None) -> str | None:
    """The ``family`` a checkpoint folder's config names (``default`` when it names none or has no config:
    the loader then reports the missing file); an empty, torn or oversized config is the same clear
    :class:`ConfigError` as :func:`load_checkpoint` gives."""
    cfg_file = Path(path) / CONFIG_NAME
    if not cfg_file.is_file():
        return default
    fix = f"point at a folder written by `embeval train {kind}` or copy the checkpoint again"
    doc = read_json(cfg_file, "checkpoint config", fix, max_bytes=4 << 20)
    return doc.get("family", default) if isinstance(doc, dict) else default


def load_model(path: str | Path, kind: str, build: Callable[[dict[str, Any]], Any], family: str | None = None):
    """``(config document, network)``: the checkpoint at ``path`` (:func:`load_checkpoint`), its network built
    by ``build(config mapping)`` with the saved weights loaded; ``family``: the document's family it must be."""
    doc, state = load_checkpoint(path, kind)
    if family is not None and doc.get("family") != family:
        raise ConfigError(f"checkpoint {path} is not a {family} {kind.upper()} (family {doc.get('family')!r})")
    net = build(doc["config"])
    net.load_state_dict(state)
    return doc, net
