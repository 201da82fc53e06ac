"""Where an embedded model runs its inference: ``device`` = ``"auto"`` (CUDA when torch sees a GPU, else
the CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``. The default everywhere is ``"cpu"``: the tiny models are
fast there, and a run's records do not depend on which machine has a GPU."""
from __future__ import annotations

import re

from embeval.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str | None) -> str:
    """The torch device string for ``device`` (see the module docstring; None = ``"cpu"``); :class:`ConfigError`
    in one line for an unknown name or a CUDA device torch cannot see."""
    import torch

    d = "cpu" if device is None else str(device).strip().lower()
    if d == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if d == "cpu":
        return d
    m = re.fullmatch(r"cuda(?::(\d+))?", d)
    if not m:
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {device!r}")
    if not torch.cuda.is_available():
        raise ConfigError(f"device {device!r}: torch sees no CUDA GPU here; use device cpu (or auto: the GPU when there is one)")
    if m.group(1) is not None and int(m.group(1)) >= torch.cuda.device_count():
        raise ConfigError(f"device {device!r}: torch sees {torch.cuda.device_count()} CUDA GPU(s) (cuda:0..); pick one of those")
    return d
