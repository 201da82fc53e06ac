"""Registry adapters ``embedded`` (kinds ``policy`` and ``vlm``): the models this project trains.

Subject spec::

    kind: policy            # or vlm
    adapter: embedded
    path: tiny-vla          # a shipped name (embeval.subjects.embedded.zoo.shipped_models) or a checkpoint folder
    params: {device: auto}  # optional: where the network runs, auto | cpu (default) | cuda | cuda:N
"""
from __future__ import annotations


def EmbeddedPolicy(id: str = "", path: str = "tiny-vla", binary_gripper: bool = True, device: str = "cpu"):
    """A shipped or trained tiny VLA as a Policy (and a BatchedPolicy: ``reset_slots`` / ``act_slots``)."""
    from embeval.subjects.embedded.zoo import load_vla

    return load_vla(path, id=id or None, binary_gripper=binary_gripper, device=device)


def EmbeddedVLM(id: str = "", path: str = "tiny-vlm", device: str = "cpu"):
    """A shipped or trained tiny VLM as a VLM (and a BatchedVLM: ``generate_batch``)."""
    from embeval.subjects.embedded.zoo import load_vlm

    return load_vlm(path, id=id or None, device=device)
