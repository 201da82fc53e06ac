"""Shared test setup: localhost-only DDS, offline hubs, the UR arm of the hardware-in-the-loop tier.

HIL tests (marker ``hil``) run everywhere: against the real UR5 at ``UR_ROBOT_IP`` when it is set, else
against the UR controller emulator (``embeval ur-emulator``) on a loopback address of its own, through
the same unmodified ur_rtde client (fixtures :func:`ur_robot` and :func:`ur_emulator`). Only tests that
need a camera device skip without one.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

import embeval  # noqa: F401  (applies the runtime defaults: DDS profile, offline hubs)


@dataclass
class URTarget:
    """The UR controller a HIL test talks to: its IP, whether it is the emulator, and the emulator's process."""

    ip: str
    emulated: bool
    process: object = None  # embeval.robot.ur_emulator.process.EmulatorProcess when emulated
    arm_kwargs: dict = field(default_factory=dict)  # extra embeval.robot.ur_rtde_backend.URRtdeArm arguments

    def log(self) -> str:
        """What the emulator printed so far ('' for a real robot)."""
        return self.process.log() if self.process is not None else ""


def start_ur_emulator(*extra: str, unlock_delay: float = 0.3) -> URTarget:
    """``embeval ur-emulator`` in a subprocess on a free loopback address (ur_rtde's blocking C++ calls hold
    the GIL, so the emulator must not share the test's interpreter); stop it with ``target.process.close()``.
    The unlock delay is short (a real controller refuses an unlock for 5 s) to keep the tests fast."""
    pytest.importorskip("rtde_control", reason="the ur_rtde client is missing: run scripts/install.sh")
    from embeval.robot.ur_emulator.process import EmulatorProcess

    proc = EmulatorProcess("--unlock-delay", str(unlock_delay), *extra)
    return URTarget(proc.host, True, proc)


@pytest.fixture(scope="module")
def ur_emulator():
    """The UR controller emulator on loopback for one test module (always the emulator, robot or not)."""
    target = start_ur_emulator()
    yield target
    target.process.close()


@pytest.fixture(scope="module")
def ur_robot():
    """The HIL tier's UR controller: the real UR5 at ``UR_ROBOT_IP`` when set, else the emulator on loopback."""
    ip = os.environ.get("UR_ROBOT_IP", "")
    if ip:
        yield URTarget(ip, False)
        return
    target = start_ur_emulator()
    yield target
    target.process.close()
