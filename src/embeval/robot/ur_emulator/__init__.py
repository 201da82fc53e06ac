"""A UR e-Series controller emulator that the unmodified ``ur_rtde`` client drives.

It serves RTDE (30004), the dashboard server (29999) and the script interface (30003) on a
configurable host (loopback by default), recognises ur_rtde's uploaded control script and runs its
register protocol natively, moves a UR5 (:mod:`embeval.kinematics`) with speed and acceleration
limits, and raises protective stops the way the real controller reports them. Start it with
``embeval ur-emulator`` or::

    from embeval.robot.ur_emulator import URControllerEmulator
    with URControllerEmulator("127.0.0.1") as emu:
        ...  # rtde_control.RTDEControlInterface("127.0.0.1") etc.

From a process that also runs the ur_rtde client, use :class:`EmulatorProcess` (a subprocess):
ur_rtde's calls hold the GIL, which would starve an emulator thread in the same process.

See docs/ros.md ("Rehearse a real-arm run against the emulator") for what differs from a real arm.
"""
from embeval.robot.ur_emulator.controller import Controller, EmulatorConfig
from embeval.robot.ur_emulator.process import EmulatorProcess, free_loopback_host
from embeval.robot.ur_emulator.server import URControllerEmulator

__all__ = ["Controller", "EmulatorConfig", "EmulatorProcess", "URControllerEmulator", "free_loopback_host"]
