"""Registry adapters ``embedded`` (kinds ``policy`` and ``vlm``): the models this project trains.

Subject spec::

    kind: policy            # or vlm
    adapter: embedded
    path: tiny-vla          # a shipped name (embeval.subjects.embedded.zoo.shipped_models) or a checkpoint folder
"""
from __future__ import annotations


def EmbeddedPolicy(id: str = "", path: str = "tiny-vla", binary_gripper: bool = True):
    """A shipped or trained tiny VLA as a Policy."""
    from embeval.subjects.embedded.zoo import load_vla

    return load_vla(path, id=id or None, binary_gripper=binary_gripper)


def EmbeddedVLM(id: str = "", path: str = "tiny-vlm"):
    """A shipped or trained tiny VLM as a VLM."""
    from embeval.subjects.embedded.zoo import load_vlm

    return load_vlm(path, id=id or None)
