"""Importing a pyiqa architecture without side effects on the rest of the process.

pyiqa (0.1.16) finds an architecture class by the name of its module (``LPIPS`` in ``lpips_arch.py``). For a class
in a module of another name (``CFANet``, topiq's, in ``topiq_arch.py``) it imports every architecture module, and two
of them (Compare2Score's and Q-Align's, through Q-Align's mPLUG-Owl2 code) replace transformers' Llama classes
(``LlamaDecoderLayer``, ``LlamaModel.forward``, ...) for the whole process: every Llama-based model built after it in that process (SmolVLA's text model, the HF VLM subjects)
then fails with ``'LlamaConfig' object has no attribute 'rope_theta'``. :func:`import_arch` imports only the module
that defines the class, so pyiqa never takes that path; :func:`llama_kept_if_it_fails` undoes the replacement when one
of those metrics is asked for and cannot be built (offline, no checkpoint).
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

#: pyiqa architecture modules that replace transformers' Llama classes for the whole process when imported (both
#: import Q-Align's mPLUG-Owl2 code)
REPLACES_LLAMA = ("pyiqa.archs.qalign_arch", "pyiqa.archs.compare2score_arch")
_LLAMA = ("transformers.models.llama.configuration_llama", "transformers.models.llama.modeling_llama")


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


def _arch_type(metric: str) -> str | None:
    from pyiqa.default_model_configs import DEFAULT_CONFIGS

    return DEFAULT_CONFIGS.get(metric, {}).get("metric_opts", {}).get("type")


def import_metric_arch(metric: str) -> None:
    """:func:`import_arch` for the architecture of pyiqa metric ``metric`` (nothing for a name pyiqa does not know)."""
    arch = _arch_type(metric)
    if arch:
        import_arch(arch)


@contextmanager
def llama_kept_if_it_fails(metric: str) -> Iterator[None]:
    """Around building pyiqa metric ``metric``: when its architecture's module is one of :data:`REPLACES_LLAMA`
    (Q-Align, Compare2Score) and the build fails (its checkpoint missing, as offline), transformers' Llama modules and
    classes are put back as they were, so that a Llama model built later in this process is transformers' own. A
    build that succeeds keeps them replaced: its model needs them."""
    arch = _arch_type(metric)
    if not arch or _defining_module(arch) not in REPLACES_LLAMA:
        yield
        return
    modules = [importlib.import_module(name) for name in _LLAMA]
    saved = [(m, dict(vars(m))) for m in modules]
    classes = [getattr(modules[1], n) for n in ("LlamaModel", "LlamaForCausalLM")]
    forwards = [(c, vars(c).get("forward")) for c in classes]
    try:
        yield
    except BaseException:
        for m, before in saved:
            for k in [k for k in vars(m) if k not in before]:
                delattr(m, k)
            for k, v in before.items():
                if vars(m).get(k) is not v:
                    setattr(m, k, v)
        for c, f in forwards:
            if f is not None:
                c.forward = f
        raise
