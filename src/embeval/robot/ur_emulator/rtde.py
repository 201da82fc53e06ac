"""RTDE wire format (protocol version 2), as a UR controller speaks it on port 30004.

A message is ``uint16 size (big-endian, header included) | uint8 type | payload``. Types are ASCII
letters: ``V`` protocol version, ``v`` controller version, ``M`` text message, ``O``/``I`` output/input
recipe setup, ``S``/``P`` start/pause, ``U`` data package. A data package starts with its recipe id
(uint8), then the recipe's fields packed big-endian in recipe order.

Field names and types follow UR's RTDE guide; a name not in the tables is answered ``NOT_FOUND``
(outputs) and the input setup fails with ``NOT_FOUND`` too, as the controller does.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

HEADER = struct.Struct(">HB")
MAX_MESSAGE = 65535  # the size field is uint16

REQUEST_PROTOCOL_VERSION = ord("V")
GET_URCONTROL_VERSION = ord("v")
TEXT_MESSAGE = ord("M")
DATA_PACKAGE = ord("U")
SETUP_OUTPUTS = ord("O")
SETUP_INPUTS = ord("I")
START = ord("S")
PAUSE = ord("P")

#: RTDE type name -> struct format (big-endian, no padding)
TYPE_FORMATS = {
    "BOOL": "?", "UINT8": "B", "UINT32": "I", "UINT64": "Q", "INT32": "i", "DOUBLE": "d",
    "VECTOR3D": "3d", "VECTOR6D": "6d", "VECTOR6INT32": "6i", "VECTOR6UINT32": "6I",
}


def _registers(prefix: str, kind: str, n: int = 48) -> dict[str, str]:
    return {f"{prefix}_{kind}_register_{i}": ("INT32" if kind == "int" else "DOUBLE") for i in range(n)}


#: controller -> client fields
OUTPUT_TYPES: dict[str, str] = {
    "timestamp": "DOUBLE",
    **{n: "VECTOR6D" for n in (
        "target_q", "target_qd", "target_qdd", "target_current", "target_moment", "actual_q", "actual_qd",
        "actual_qdd", "actual_current", "actual_current_as_torque", "actual_moment", "joint_control_output",
        "actual_TCP_pose", "actual_TCP_speed", "actual_TCP_force", "target_TCP_pose", "target_TCP_speed",
        "joint_temperatures", "actual_joint_voltage", "ft_raw_wrench", "payload_inertia")},
    **{n: "VECTOR3D" for n in ("actual_tool_accelerometer", "elbow_position", "elbow_velocity", "payload_cog")},
    "actual_digital_input_bits": "UINT64", "actual_digital_output_bits": "UINT64",
    "actual_execution_time": "DOUBLE", "robot_mode": "INT32", "joint_mode": "VECTOR6INT32",
    "safety_mode": "INT32", "safety_status": "INT32", "speed_scaling": "DOUBLE", "target_speed_fraction": "DOUBLE",
    "actual_momentum": "DOUBLE", "actual_main_voltage": "DOUBLE", "actual_robot_voltage": "DOUBLE",
    "actual_robot_current": "DOUBLE", "runtime_state": "UINT32", "robot_status_bits": "UINT32",
    "safety_status_bits": "UINT32", "analog_io_types": "UINT32", "standard_analog_input0": "DOUBLE",
    "standard_analog_input1": "DOUBLE", "standard_analog_output0": "DOUBLE", "standard_analog_output1": "DOUBLE",
    "io_current": "DOUBLE", "tool_mode": "UINT32", "tool_analog_input_types": "UINT32",
    "tool_analog_input0": "DOUBLE", "tool_analog_input1": "DOUBLE", "tool_output_voltage": "INT32",
    "tool_output_current": "DOUBLE", "tool_temperature": "DOUBLE", "tcp_force_scalar": "DOUBLE",
    "payload": "DOUBLE", "script_control_line": "UINT32",
    "output_bit_registers0_to_31": "UINT32", "output_bit_registers32_to_63": "UINT32",
    "input_bit_registers0_to_31": "UINT32", "input_bit_registers32_to_63": "UINT32",
    **_registers("output", "int"), **_registers("output", "double"),
    **_registers("input", "int"), **_registers("input", "double"),
}

#: client -> controller fields
INPUT_TYPES: dict[str, str] = {
    "speed_slider_mask": "UINT32", "speed_slider_fraction": "DOUBLE",
    "standard_digital_output_mask": "UINT8", "standard_digital_output": "UINT8",
    "configurable_digital_output_mask": "UINT8", "configurable_digital_output": "UINT8",
    "tool_digital_output_mask": "UINT8", "tool_digital_output": "UINT8",
    "standard_analog_output_mask": "UINT8", "standard_analog_output_type": "UINT8",
    "standard_analog_output_0": "DOUBLE", "standard_analog_output_1": "DOUBLE",
    "input_bit_registers0_to_31": "UINT32", "input_bit_registers32_to_63": "UINT32",
    "external_force_torque": "VECTOR6D",
    **_registers("input", "int"), **_registers("input", "double"),
}


class ProtocolError(ValueError):
    """A malformed message from a client (the connection is closed with this reason)."""


def frame(msg_type: int, payload: bytes = b"") -> bytes:
    """One RTDE message: header + payload."""
    size = HEADER.size + len(payload)
    if size > MAX_MESSAGE:
        raise ProtocolError(f"RTDE message of {size} bytes exceeds the 65535-byte limit")
    return HEADER.pack(size, msg_type) + payload


@dataclass(frozen=True)
class Recipe:
    """A set-up recipe: id, field names, their RTDE types and the struct that packs them."""

    recipe_id: int
    names: tuple[str, ...]
    types: tuple[str, ...]

    @property
    def struct(self) -> struct.Struct:
        return struct.Struct(">" + "".join(TYPE_FORMATS[t] for t in self.types))

    def pack(self, values: dict) -> bytes:
        """Data package payload (recipe id + fields) from ``values[name]`` (scalars or sequences)."""
        flat = []
        for name, typ in zip(self.names, self.types):
            v = values[name]
            if typ.startswith("VECTOR"):
                flat.extend(v)
            else:
                flat.append(v)
        return bytes([self.recipe_id]) + self.struct.pack(*flat)

    def unpack(self, body: bytes) -> dict:
        """Field values of a data package body (after the recipe id byte)."""
        st = self.struct
        if len(body) != st.size:
            raise ProtocolError(f"data package for input recipe {self.recipe_id} has {len(body)} bytes, "
                                f"the recipe {list(self.names)} needs {st.size}")
        flat = list(st.unpack(body))
        out = {}
        for name, typ in zip(self.names, self.types):
            n = int(TYPE_FORMATS[typ][0]) if typ.startswith("VECTOR") else 1
            out[name] = tuple(flat[:n]) if n > 1 else flat[0]
            del flat[:n]
        return out


def parse_names(payload: bytes) -> list[str]:
    """Comma-separated variable names (a trailing comma, as ur_rtde sends, is ignored)."""
    try:
        text = payload.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError("recipe variable names are not ASCII") from None
    return [n.strip() for n in text.split(",") if n.strip()]
