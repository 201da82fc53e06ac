"""The embedded subjects Act2Answer's demo and bench use.

:func:`embedded_policy` loads a shipped tiny VLA by name (or a checkpoint folder). Random weights
are given only on an explicit request: the name ``tiny-vla-untrained`` (:data:`UNTRAINED`), or
``allow_untrained=True`` for a known name whose weights are not shipped (a fresh checkout before
``embeval train``; the demo), named ``<name>-untrained`` so no table mistakes it for a trained
model. An unknown name is an error listing the shipped names, never a silently untrained model.
"""
from __future__ import annotations

import warnings

#: the explicit request for the tiny VLA architecture with seeded random weights (a floor, the probing control)
UNTRAINED = "tiny-vla-untrained"


def embedded_policy(name: str = "tiny-vla", seed: int = 0, allow_untrained: bool = False):
    """A :class:`~embeval.subjects.embedded.policy.TinyVLAPolicy`: shipped ``name`` or a checkpoint folder;
    :data:`UNTRAINED` for random weights. :class:`MissingWeightsError` (listing the shipped names, with a
    "did you mean") for anything else, unless ``allow_untrained`` and ``name`` is a known population member."""
    from embeval.errors import MissingWeightsError
    from embeval.subjects.embedded.zoo import known_names, load_vla

    if str(name) == UNTRAINED:
        return untrained_policy(UNTRAINED, seed)
    try:
        return load_vla(name)
    except MissingWeightsError:
        if not (allow_untrained and str(name) in known_names("vla")):
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


def a2a_vlms() -> list:
    """The shipped VLMs trained to answer Act2Answer's binary questions from both cards (positive
    controls, population.json ``"vlm_a2a"``); empty when none are shipped."""
    from embeval.errors import MissingWeightsError
    from embeval.subjects.embedded.zoo import a2a_names, load_vlm

    out = []
    for n in a2a_names():
        try:
            out.append(load_vlm(n))
        except MissingWeightsError:
            continue
    return out


def a2a_vlas() -> list:
    """The shipped VLAs built on a two-card VLM's backbone (population.json ``"vla_a2a"``:
    ``tiny-vla-a2a-frozen``, ``tiny-vla-a2a-full``); empty when none are shipped."""
    from embeval.errors import MissingWeightsError
    from embeval.subjects.embedded.zoo import a2a_names, load_vla

    out = []
    for n in a2a_names("vla_a2a"):
        try:
            out.append(load_vla(n))
        except MissingWeightsError:
            continue
    return out


def random_weight_control(policy, seed: int = 0):
    """The probing's random-weight control of ``policy``: the same architecture with seeded random
    weights (tiny VLA or choice VLA), or None for other subjects."""
    import torch

    from embeval.subjects.embedded.choice_vla import ChoiceVLAPolicy, build_net
    from embeval.subjects.embedded.policy import TinyVLAPolicy

    if isinstance(policy, ChoiceVLAPolicy):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            net = build_net(policy.cfg)
        return ChoiceVLAPolicy(net, policy.action_mean, policy.action_std, id=f"{policy.id}-random-weights")
    if isinstance(policy, TinyVLAPolicy):
        return untrained_policy("random-weights", seed)
    return None
