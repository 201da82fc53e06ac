"""Per-layer hidden states of torch-based subjects, captured with forward hooks (for probing).

:func:`capture_hidden_states` runs any forward pass and records the outputs of the chosen
sub-modules; :class:`HiddenStateMixin` gives a subject ``hidden_states(inputs)``. By default the
layers are the blocks of the model's stacks (every element of an ``nn.ModuleList`` whose elements
are transformer/conv blocks), named by their module path, e.g. ``model.language_model.layers.3``.

Pooling (``pool``): ``"none"`` keeps each output as is (float32); ``"mean"`` averages over the
sequence axis (``seq_axis``: 1 for batch-first transformers, 0 for sequence-first ones like ACT, 2 for
(B, C, T) 1-D convolutions like Diffusion Policy's U-Net) or
over the spatial axes of (B, C, H, W) maps; ``"last"`` takes the last sequence position. Pooled
arrays have shape (batch, features).
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from embeval.errors import ConfigError

POOLS = ("none", "mean", "last")


def _first_tensor(out: Any):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):
        for key in ("last_hidden_state", "hidden_states"):
            if key in out and isinstance(out[key], torch.Tensor):
                return out[key]
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    if hasattr(out, "to_tuple"):
        return _first_tensor(out.to_tuple())
    return None


def default_layers(module) -> list[str]:
    """Names of the blocks in every ``nn.ModuleList`` of ``module`` (lists nested inside an already
    selected list's blocks are skipped)."""
    import torch.nn as nn

    lists: list[str] = []
    names: list[str] = []
    for name, sub in module.named_modules():  # pre-order: outer lists come first
        if not isinstance(sub, nn.ModuleList) or not len(sub):
            continue
        if not all(any(True for _ in b.parameters()) for b in sub):
            continue
        if any(name.startswith(outer + ".") for outer in lists):
            continue
        lists.append(name)
        names.extend(f"{name}.{i}" if name else str(i) for i in range(len(sub)))
    return names


def pool_array(x: np.ndarray, pool: str, seq_axis: int = 1) -> np.ndarray:
    """Pool one captured output (see module docstring)."""
    if pool == "none":
        return x
    if x.ndim == 4:  # (B, C, H, W) feature maps
        return x.mean(axis=(2, 3)) if pool == "mean" else x[:, :, -1, -1]
    if x.ndim == 3:
        x = np.moveaxis(x, seq_axis, 1)  # -> (batch, sequence, features)
        return x.mean(axis=1) if pool == "mean" else x[:, -1]
    if x.ndim == 2:
        return x
    return x.reshape(x.shape[0], -1) if x.ndim > 2 else x[None]


def capture_hidden_states(module, run: Callable[[], Any], layers: Sequence[str] | str | None = None,
                          pool: str = "mean", seq_axis: int = 1) -> dict[str, np.ndarray]:
    """Run ``run()`` (a forward pass through ``module``) and return ``{layer name: output array}``.

    ``layers``: module names (see ``module.named_modules()``), a regex selecting them, or None for
    :func:`default_layers`. Outputs of a layer called several times (e.g. during generation) are
    those of its first call. Raises :class:`ConfigError` for unknown layer names.
    """
    import torch

    if pool not in POOLS:
        raise ConfigError(f"pool must be one of {', '.join(POOLS)}, got {pool!r}")
    named = dict(module.named_modules())
    if layers is None:
        names = default_layers(module)
    elif isinstance(layers, str):
        rx = re.compile(layers)
        names = [n for n in named if n and rx.fullmatch(n)]
    else:
        names = list(layers)
    unknown = [n for n in names if n not in named]
    if unknown or not names:
        raise ConfigError(f"unknown or no layers {unknown[:5] or layers!r}; available e.g. {list(named)[1:8]}")
    captured: dict[str, np.ndarray] = {}
    handles = []

    def make_hook(name):
        def hook(_mod, _inp, out):
            if name in captured:
                return
            t = _first_tensor(out)
            if t is not None:
                captured[name] = t.detach().float().cpu().numpy()
        return hook

    try:
        for n in names:
            handles.append(named[n].register_forward_hook(make_hook(n)))
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return {n: pool_array(captured[n], pool, seq_axis) for n in names if n in captured}


class HiddenStateMixin:
    """Gives a torch subject ``hidden_states(inputs, layers=None, pool="mean")``.

    Subclasses implement ``_hidden_module()`` (the ``nn.Module`` to hook) and
    ``_hidden_forward(inputs)`` (one forward pass for ``inputs``, whatever the subject takes:
    an Observation for policies, ``(images, prompt)`` for VLMs); ``_hidden_seq_axis`` says where
    the sequence axis is.
    """

    _hidden_seq_axis: int = 1

    def _hidden_module(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def _hidden_forward(self, inputs: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def hidden_layers(self) -> list[str]:
        """The default layer names :meth:`hidden_states` returns."""
        return default_layers(self._hidden_module())

    def hidden_states(self, inputs: Any, layers: Sequence[str] | str | None = None, pool: str = "mean") -> dict[str, np.ndarray]:
        """``{layer name: array}`` for one input (see :func:`capture_hidden_states`)."""
        return capture_hidden_states(self._hidden_module(), lambda: self._hidden_forward(inputs), layers, pool,
                                     self._hidden_seq_axis)
