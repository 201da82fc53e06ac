"""Shared test setup: localhost-only DDS, offline hubs, the UR arm of the hardware-in-the-loop tier.

HIL tests (marker ``hil``) run everywhere: against the real UR5 at ``UR_ROBOT_IP`` when it is set, else
against the UR controller emulator (``embeval ur-emulator``) on a loopback address of its own, through
the same unmodified ur_rtde client (fixtures :func:`ur_robot` and :func:`ur_emulator`). Only tests that
need a camera device skip without one.
"""
from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import embeval  # noqa: F401  (applies the runtime defaults: DDS profile, offline hubs)

ROOT = Path(__file__).resolve().parents[1]
#: the ports a UR controller serves: RTDE, dashboard, script
UR_PORTS = (30004, 29999, 30003)


@dataclass
class URTarget:
    """The UR controller a HIL test talks to: its IP, whether it is the emulator, and the emulator's log."""

    ip: str
    emulated: bool
    process: subprocess.Popen | None = None
    lines: list[str] = field(default_factory=list)
    arm_kwargs: dict = field(default_factory=dict)  # extra embeval.robot.ur_rtde_backend.URRtdeArm arguments

    def log(self) -> str:
        return "\n".join(self.lines)


def _loopback_with_free_ports() -> str:
    """A random 127.x.y.z on which the UR ports are free (tests and emulators of other runs use others)."""
    rng = random.Random()
    for _ in range(100):
        host = f"127.{rng.randint(1, 254)}.{rng.randint(0, 254)}.{rng.randint(2, 254)}"
        free = True
        for port in UR_PORTS:
            with socket.socket() as s:
                try:
                    s.bind((host, port))
                except OSError:
                    free = False
                    break
        if free:
            return host
    raise RuntimeError("no loopback address with the UR ports 30004, 29999, 30003 free")


def start_ur_emulator(*extra: str, unlock_delay: float = 0.3, timeout_s: float = 30.0) -> URTarget:
    """``embeval ur-emulator`` in a subprocess on a free loopback address (ur_rtde's blocking C++ calls hold
    the GIL, so the emulator must not share the test's interpreter). Stop it with :func:`stop_ur_emulator`."""
    pytest.importorskip("rtde_control", reason="the ur_rtde client is missing: run scripts/install.sh")
    host = _loopback_with_free_ports()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "embeval.cli", "ur-emulator", "--host", host, "--unlock-delay",
                             str(unlock_delay), *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    target = URTarget(host, True, proc)
    ready = threading.Event()

    def drain():
        for line in proc.stdout:
            target.lines.append(line.rstrip("\n"))
            if "Ctrl-C stops" in line:
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(timeout_s) or proc.poll() is not None:
        stop_ur_emulator(target)
        raise RuntimeError(f"embeval ur-emulator did not start on {host}:\n{target.log()}")
    return target


def stop_ur_emulator(target: URTarget) -> None:
    proc = target.process
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def ur_emulator():
    """The UR controller emulator on loopback for one test module (always the emulator, robot or not)."""
    target = start_ur_emulator()
    yield target
    stop_ur_emulator(target)


@pytest.fixture(scope="module")
def ur_robot():
    """The HIL tier's UR controller: the real UR5 at ``UR_ROBOT_IP`` when set, else the emulator on loopback."""
    ip = os.environ.get("UR_ROBOT_IP", "")
    if ip:
        yield URTarget(ip, False)
        return
    target = start_ur_emulator()
    yield target
    stop_ur_emulator(target)

