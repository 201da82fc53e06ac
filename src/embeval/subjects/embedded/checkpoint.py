"""Save and load embedded models: a folder with ``config.json`` (architecture, normalisation,
training provenance) and ``model.safetensors`` (float32 weights). No pickle is ever loaded."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embeval.errors import ConfigError, MissingWeightsError

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
    doc = json.loads(cfg_file.read_text())
    if doc.get("kind") != kind:
        raise ConfigError(f"checkpoint {path} holds a {doc.get('kind')!r} model, expected {kind!r}")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"checkpoint {path} has format_version {doc.get('format_version')}, this code reads {FORMAT_VERSION}")
    return doc, load_file(str(w_file))
