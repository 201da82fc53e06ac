"""The embedded subjects Act2Answer's demo and bench use, with an honest fallback.

:func:`embedded_policy` loads a shipped tiny VLA; when no weights are shipped (a fresh checkout
before ``embeval train``), it builds the same architecture with seeded random weights and names
it ``<name>-untrained`` so no table mistakes it for a trained model.
"""
from __future__ import annotations

import warnings


def embedded_policy(name: str = "tiny-vla", seed: int = 0, allow_untrained: bool = True):
    """A :class:`~embeval.subjects.embedded.policy.TinyVLAPolicy` (shipped ``name``, or untrained)."""
    from embeval.errors import MissingWeightsError
    from embeval.subjects.embedded.zoo import load_vla

    try:
        return load_vla(name)
    except MissingWeightsError:
        if not allow_untrained:
            raise
    warnings.warn(f"no shipped {name} weights; using {name}-untrained (random weights, seed {seed})", stacklevel=2)
    return untrained_policy(f"{name}-untrained", seed)


def untrained_policy(id: str = "tiny-vla-untrained", seed: int = 0):
    """The tiny VLA architecture with seeded random weights (the random-weight probing control)."""
    import numpy as np
    import torch

    from embeval.subjects.embedded.nets import TinyVLANet, VLAConfig
    from embeval.subjects.embedded.policy import TinyVLAPolicy

    cfg = VLAConfig()
    if hasattr(cfg, "action_mode"):
        cfg.action_mode = "delta"  # outputs are 7-DoF deltas, un-normalised with the scale below
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        net = TinyVLANet(cfg)
    # action scale of the expert demonstrations (about 5 cm per step), so random actions move
    return TinyVLAPolicy(net, np.zeros(6), np.array([0.02, 0.02, 0.02, 0.05, 0.05, 0.05]), id=id)


def embedded_vlms() -> list:
    """The shipped tiny VLMs (empty list when none are shipped)."""
    from embeval.errors import MissingWeightsError
    from embeval.subjects.embedded.zoo import load_vlm, population_names, shipped_models

    names = population_names("vlm") or shipped_models("vlm")
    out = []
    for n in names:
        try:
            out.append(load_vlm(n))
        except MissingWeightsError:
            continue
    return out
