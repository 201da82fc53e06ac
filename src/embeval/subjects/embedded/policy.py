"""The tiny VLA as a :class:`~embeval.subjects.protocols.Policy`.

Action convention: 7-DoF delta ``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` in frame ``base``
(metres, radians, gripper 1 = open), one action per :meth:`act` call.

Batched: :meth:`TinyVLAPolicy.act_slots` runs one forward pass for many episodes (slots, see
:class:`~embeval.subjects.protocols.BatchedPolicy`); each slot keeps its own instruction.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embeval.action import GRIPPER_CLOSED_BELOW, Action, ActionSpec, Observation
from embeval.errors import InvalidInputError
from embeval.subjects.embedded.checkpoint import load_model, save_checkpoint
from embeval.subjects.embedded.device import resolve_device
from embeval.subjects.embedded.preprocess import resize_image, state_vector
from embeval.subjects.embedded.text_encoder import TextEncoder, shared_text_encoder
from embeval.subjects.hidden import HiddenStateMixin
from embeval.subjects.protocols import Slot, check_slots, no_episode


def workspace_floor(action: np.ndarray, observation: Observation, min_tcp_z: float | None) -> np.ndarray:
    """Clip ``action``'s dz in place so the commanded TCP stays at or above ``min_tcp_z`` (metres,
    frame base) when the observation has ``tcp_pose``; None leaves it. Returns ``action``."""
    if min_tcp_z is not None and "tcp_pose" in observation.state:
        z = float(np.asarray(observation.state["tcp_pose"]).reshape(-1)[2])
        action[2] = max(action[2], min(0.0, min_tcp_z - z))
    return action


class TinyVLAPolicy(HiddenStateMixin):
    """A trained :class:`~embeval.subjects.embedded.nets.TinyVLANet` with its normalisation.

    ``action_mean``/``action_std`` un-normalise the regression outputs; the gripper output is a
    logit (sigmoid, then thresholded at 0.5 unless ``binary_gripper=False``). In waypoint mode
    (``VLAConfig.action_mode``) the network predicts the TCP pose to head for and the action is the
    delta from the observed ``tcp_pose`` to it (:func:`embeval.robot.base.pose_delta`), clipped to
    ``max_step`` metres and ``max_rot`` radians.
    Workspace floor: when the observation has ``tcp_pose`` and ``min_tcp_z`` is set (metres, frame
    base; default 0.02, the expert's lowest grasp height), ``dz`` is clipped so the commanded TCP
    stays at or above it, as a deployment's workspace limits would (None disables it).

    Hidden states (:meth:`hidden_states`, input: an Observation after :meth:`reset`): layers
    ``encoders.<camera>.blocks.<i>`` (vision CNN, pooled over space), ``backbone.<i>`` (vision +
    language fusion) and ``action_expert.<i>`` (the action head), each (1, D).

    ``device``: where the network runs (``auto``, ``cpu``, ``cuda``, ``cuda:N``;
    :func:`~embeval.subjects.embedded.device.resolve_device`); the instruction encoder stays on the CPU.
    Batched episodes: :meth:`reset_slots` / :meth:`act_slots` / :meth:`end_slots` (one forward per call,
    each slot with its own instruction; the policy has no other episode state).
    """

    action_spec = ActionSpec(frame="base", chunk_size=1)

    def __init__(self, net, action_mean, action_std, id: str = "tiny-vla", meta: dict | None = None,
                 text_encoder: TextEncoder | None = None, binary_gripper: bool = True, min_tcp_z: float | None = 0.02,
                 device: str = "cpu"):
        import torch

        self.device = resolve_device(device)
        self.net = net.eval().to(self.device)
        self.cfg = net.cfg
        self.id = id
        self.meta = dict(meta or {})
        self.action_mean = np.asarray(action_mean, dtype=np.float32)
        self.action_std = np.asarray(action_std, dtype=np.float32)
        self.binary_gripper = binary_gripper
        self.min_tcp_z = min_tcp_z
        self._text = text_encoder or shared_text_encoder()
        self._instruction: str | None = None
        self._temb = None
        self._slots: dict[Slot, object] = {}  # slot -> its instruction embedding (1, 384), CPU
        self._torch = torch

    def fork(self) -> "TinyVLAPolicy":
        """A policy sharing this one's network and encoder, with its own episode state."""
        return type(self)(self.net, self.action_mean, self.action_std, id=self.id, meta=self.meta, text_encoder=self._text,
                          binary_gripper=self.binary_gripper, min_tcp_z=self.min_tcp_z, device=self.device)

    # -- Policy protocol -------------------------------------------------------------------
    def reset(self, instruction: str) -> None:
        self._instruction = instruction
        self._temb = self._torch.from_numpy(self._text.encode([instruction]))

    def act(self, observation: Observation) -> Action:
        return Action(self._actions([observation])[0])

    # -- batched episodes (BatchedPolicy) ---------------------------------------------------
    def reset_slots(self, slots, instructions) -> None:
        """Start an episode with ``instructions[i]`` in ``slots[i]`` (restarting a slot in use)."""
        slots = check_slots(self.id, slots, instructions, "instructions")
        embs = self._text.encode([str(i) for i in instructions])
        for k, slot in enumerate(slots):
            self._slots[slot] = self._torch.from_numpy(embs[k:k + 1])

    def act_slots(self, slots, observations) -> list[Action]:
        """One action per slot from one forward pass over all of them."""
        slots = check_slots(self.id, slots, observations, "observations")
        missing = next((s for s in slots if s not in self._slots), None)
        if missing is not None:
            raise no_episode(self.id, missing)
        if not slots:
            return []
        temb = self._torch.cat([self._slots[s] for s in slots])
        return [Action(a) for a in self._actions(list(observations), temb)]

    def end_slots(self, slots) -> None:
        for s in slots:
            self._slots.pop(s, None)

    # -- extras ----------------------------------------------------------------------------
    def act_batch(self, observations: list[Observation]) -> np.ndarray:
        """Actions (N, 7) for observations that share the current instruction."""
        return self._actions(list(observations))

    def _actions(self, observations: list[Observation], temb=None) -> np.ndarray:
        """Actions (N, 7): ``temb`` (N, 384) instruction embeddings per row, or None for the current instruction."""
        return self._clip(self._decode(self._forward(observations, temb), observations), observations)

    def _hidden_module(self):
        return self.net

    def _hidden_forward(self, observation: Observation):
        return self._forward([observation])

    def _inputs(self, observations: list[Observation], temb=None):
        torch = self._torch
        if temb is None:
            if self._temb is None:
                instr = observations[0].instruction
                if not instr:
                    raise InvalidInputError(f"{self.id}: call reset(instruction) before act(), or set observation.instruction")
                self.reset(instr)
            temb = self._temb.expand(len(observations), -1)
        images = {}
        for cam in self.cfg.cameras:
            arr = []
            for ob in observations:
                if cam not in ob.images:
                    raise InvalidInputError(
                        f"{self.id} needs camera {cam!r}; observation has {sorted(ob.images)}")
                arr.append(resize_image(ob.images[cam], self.cfg.image_size))
            images[cam] = torch.from_numpy(np.stack(arr)).to(self.device).permute(0, 3, 1, 2).float().div_(255.0)
        state = torch.from_numpy(np.stack([state_vector(ob.state, self.cfg.state_keys) for ob in observations]))
        return images, temb.to(self.device), state.to(self.device)

    def _forward(self, observations, temb=None) -> np.ndarray:
        with self._torch.no_grad():
            return self.net(*self._inputs(observations, temb)).cpu().numpy()

    def _decode(self, out: np.ndarray, observations) -> np.ndarray:
        out = np.asarray(out, dtype=np.float64)
        n_reg = len(self.action_mean)
        reg = out[:, :n_reg] * self.action_std + self.action_mean
        act = np.empty((out.shape[0], 7))
        if self.cfg.action_mode == "waypoint":
            for i, ob in enumerate(observations):
                act[i, :6] = self._toward(reg[i], ob)
        else:
            act[:, :6] = reg[:, :6]
        p_open = 1.0 / (1.0 + np.exp(-out[:, -1]))
        act[:, 6] = (p_open >= GRIPPER_CLOSED_BELOW).astype(np.float64) if self.binary_gripper else p_open
        return act

    def _toward(self, reg: np.ndarray, ob: Observation) -> np.ndarray:
        from embeval.action import pose_delta
        from embeval.rotations import matrix_to_rotvec, quat_to_rotvec

        a, b = reg[3:6], reg[6:9]
        c0 = a / max(np.linalg.norm(a), 1e-9)
        b = b - (c0 @ b) * c0
        c1 = b / max(np.linalg.norm(b), 1e-9)
        R = np.stack([c0, c1, np.cross(c0, c1)], axis=1)
        target = np.concatenate([reg[:3], matrix_to_rotvec(R)])
        if "tcp_pose" not in ob.state:
            raise InvalidInputError(f"{self.id} needs observation.state['tcp_pose'] (x, y, z + quaternion xyzw or rotation vector)")
        tcp = np.asarray(ob.state["tcp_pose"], dtype=np.float64).reshape(-1)
        cur = np.concatenate([tcp[:3], quat_to_rotvec(tcp[3:7])]) if tcp.size == 7 else tcp[:6]
        d = pose_delta(cur, target)
        n, r = np.linalg.norm(d[:3]), np.linalg.norm(d[3:])
        if n > self.cfg.max_step:
            d[:3] *= self.cfg.max_step / n
        if r > self.cfg.max_rot:
            d[3:] *= self.cfg.max_rot / r
        return d

    def _clip(self, act: np.ndarray, observations) -> np.ndarray:
        for a, ob in zip(act, observations):
            workspace_floor(a, ob, self.min_tcp_z)
        return act

    # -- persistence -----------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        extra = {"id": self.id, "action_mean": self.action_mean.tolist(), "action_std": self.action_std.tolist(),
                 "binary_gripper": self.binary_gripper, "min_tcp_z": self.min_tcp_z, "meta": self.meta}
        return save_checkpoint(path, "vla", self.cfg.to_dict(), self.net.state_dict(), extra)

    @classmethod
    def load(cls, path: str | Path, id: str | None = None, **kw: Any) -> "TinyVLAPolicy":
        from embeval.subjects.embedded.nets import TinyVLANet, VLAConfig

        doc, net = load_model(path, "vla", lambda c: TinyVLANet(VLAConfig.from_dict(c)))
        kw.setdefault("binary_gripper", doc.get("binary_gripper", True))
        kw.setdefault("min_tcp_z", doc.get("min_tcp_z", 0.02))
        return cls(net, doc["action_mean"], doc["action_std"], id=id or doc.get("id", Path(path).name),
                   meta=doc.get("meta"), **kw)
