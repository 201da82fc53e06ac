"""Importing a pyiqa architecture without side effects on the rest of the process.

pyiqa (0.1.16) finds an architecture class by the name of its module (``LPIPS`` in ``lpips_arch.py``). For a class
in a module of another name (``CFANet``, topiq's, in ``topiq_arch.py``) it imports every architecture module, and one
of them, Q-Align's, replaces transformers' Llama classes (``LlamaDecoderLayer``, ``LlamaModel.forward``, ...) for the
whole process: every Llama-based model built after it in that process (SmolVLA's text model, the HF VLM subjects)
then fails with ``'LlamaConfig' object has no attribute 'rope_theta'``. :func:`import_arch` imports only the module
that defines the class, so pyiqa never takes that path.
"""
from __future__ import annotations

import importlib
import re
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def _defining_module(network_type: str) -> str | None:
    import pyiqa.archs

    pattern = re.compile(rf"^class {re.escape(network_type)}\b", re.M)
    for path in sorted(Path(pyiqa.archs.__file__).parent.glob("*_arch.py")):
        if pattern.search(path.read_text(encoding="utf-8", errors="replace")):
            return f"pyiqa.archs.{path.stem}"
    return None


def import_arch(network_type: str) -> None:
    """Register pyiqa's architecture class ``network_type`` (a ``metric_opts["type"]`` of pyiqa's DEFAULT_CONFIGS) by
    importing the one module that defines it; a name no module defines is left to pyiqa (its own error)."""
    from pyiqa.utils.registry import ARCH_REGISTRY

    if network_type in ARCH_REGISTRY:
        return
    module = _defining_module(network_type)
    if module is not None:
        importlib.import_module(module)


def import_metric_arch(metric: str) -> None:
    """:func:`import_arch` for the architecture of pyiqa metric ``metric`` (nothing for a name pyiqa does not know)."""
    from pyiqa.default_model_configs import DEFAULT_CONFIGS

    opts = DEFAULT_CONFIGS.get(metric, {}).get("metric_opts", {})
    if "type" in opts:
        import_arch(opts["type"])
