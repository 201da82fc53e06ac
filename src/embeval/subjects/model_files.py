"""What a model folder may make embeval run: checked before anything in it is loaded.

A checkpoint folder is outside data. Two of its files can name Python code that a loader would import and run:

- ``auto_map`` in ``config.json`` (and the processor and tokenizer configs) names ``.py`` files beside it that
  transformers imports with ``trust_remote_code=True``;
- a LeRobot ``*processor*.json`` names each pipeline step by ``registry_name`` (looked up in LeRobot's
  ``ProcessorStepRegistry``) or by ``class``, a dotted path LeRobot imports and calls with the step's ``config``
  (``{"class": "subprocess.Popen", "config": {"args": [...]}}`` runs a command).

Neither runs unless the subject spec says ``params.trust_remote_code: true``. :func:`check_subject` is what
:func:`embeval.subjects.load_subject` and ``embeval run --check`` run on a spec; :func:`check_lerobot_processors`
is the LeRobot adapter's own check. Weights themselves are safetensors or ``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embeval.errors import ConfigError

#: configs whose ``auto_map`` transformers follows
AUTO_MAP_FILES = ("config.json", "preprocessor_config.json", "processor_config.json", "tokenizer_config.json",
                  "video_preprocessor_config.json")
#: adapters that load a folder through transformers and take ``params.trust_remote_code``
REMOTE_CODE_ADAPTERS = ("hf", "openvla_hf")
#: adapters that load a LeRobot checkpoint folder
LEROBOT_ADAPTERS = ("lerobot",)
#: largest config or processor JSON read here (bytes)
MAX_CONFIG_BYTES = 4 << 20

_OPT_IN = "params.trust_remote_code: true"


def read_json(path: Path) -> Any:
    """The JSON document at ``path``, or None when it is missing, over MAX_CONFIG_BYTES or not JSON."""
    if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return None  # the loader's own check names a torn file


def remote_code_files(folder: str | Path) -> list[str]:
    """The ``.py`` files the folder's ``auto_map`` entries name (sorted; empty: none)."""
    out: set[str] = set()
    for name in AUTO_MAP_FILES:
        doc = read_json(Path(folder) / name)
        amap = doc.get("auto_map") if isinstance(doc, dict) else None
        if not isinstance(amap, dict):
            continue
        for v in amap.values():
            for ref in v if isinstance(v, (list, tuple)) else [v]:
                if isinstance(ref, str) and "." in ref:
                    out.add(ref.split("--")[-1].rsplit(".", 1)[0] + ".py")
    return sorted(out)


def check_remote_code(folder: str | Path, trust_remote_code: bool) -> None:
    """:class:`ConfigError` when the folder ships model code and the spec did not opt in."""
    code = remote_code_files(folder)
    if code and trust_remote_code is not True:
        raise ConfigError(f"{folder} ships its own model code ({', '.join(code)}, named by auto_map) and nothing from a "
                          f"model folder runs by default: set {_OPT_IN} to run it (it runs as this user, with its rights), "
                          "or use a transformers-format conversion of the checkpoint")


def lerobot_steps() -> tuple[set[str], set[str]]:
    """(registry names, dotted class paths) of the processor steps LeRobot itself registers (its
    ``ProcessorStepRegistry`` after importing its processors and policies; 0.4 and 0.6 keep it there)."""
    import importlib

    from lerobot.processor import ProcessorStepRegistry

    for mod in ("lerobot.processor", "lerobot.policies.factory"):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass
    names = list(ProcessorStepRegistry.list())
    classes = {f"{c.__module__}.{c.__qualname__}" for c in (ProcessorStepRegistry.get(n) for n in names)}
    return set(names), classes


def check_lerobot_processors(folder: str | Path, trust_remote_code: bool = False) -> None:
    """:class:`ConfigError` naming the first step of a ``*processor*.json`` in ``folder`` that is not one of
    LeRobot's registered steps (by ``registry_name``, or by ``class`` equal to a registered step's class), unless
    ``trust_remote_code``. Reads JSON only: no step is imported."""
    if trust_remote_code is True:
        return
    names = classes = None
    for f in sorted(Path(folder).glob("*processor*.json")):
        doc = read_json(f)
        steps = doc.get("steps") if isinstance(doc, dict) else None
        if not isinstance(steps, list):
            continue
        if names is None:
            names, classes = lerobot_steps()
        for i, step in enumerate(steps):
            step = step if isinstance(step, dict) else {}
            reg, cls = step.get("registry_name"), step.get("class")
            ok = reg in names if reg is not None else cls in classes
            if not ok:
                what = f"registry_name {reg!r}" if reg is not None else f"class {str(cls)[:80]!r}"
                raise ConfigError(f"{f} step {i}: {what} is not a processor step LeRobot registers, and a step it names "
                                  f"would be imported and run: use a checkpoint saved by LeRobot, or set {_OPT_IN} "
                                  "if you wrote that step and trust the folder")


def check_subject(adapter: str, path: str | Path | None, params: dict[str, Any]) -> None:
    """The model-folder checks for one subject spec (nothing loaded); a no-op without a local folder."""
    if not path or not Path(path).is_dir():
        return
    trust = params.get("trust_remote_code", False)
    if adapter in REMOTE_CODE_ADAPTERS:
        check_remote_code(path, trust)
    elif adapter in LEROBOT_ADAPTERS:
        check_lerobot_processors(path, trust)
