"""Shared test setup: localhost-only DDS, offline hubs, hardware markers."""
from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import pytest

from embeval.env import configure

configure()  # the runtime defaults every embeval program sets: localhost DDS profile, offline hubs, Agg


def pytest_collection_modifyitems(config, items):
    have_robot = bool(os.environ.get("UR_ROBOT_IP"))
    skip_hil = pytest.mark.skip(reason="hardware-in-the-loop: set UR_ROBOT_IP (and connect a RealSense) to run")
    for item in items:
        if "hil" in item.keywords and not have_robot:
            item.add_marker(skip_hil)


#: ROS 2 domain ids handed to tests (Fast DDS maps a domain to UDP ports; 1..100 stays well inside the valid range).
_DOMAIN_IDS = range(1, 101)
_DOMAIN_LOCKS = Path(tempfile.gettempdir()) / "embeval-ros-domains"


def allocate_domain_id() -> tuple[int, int]:
    """A ROS domain id no other test on this machine holds now (any process): ``(id, lock fd)``.

    Each id is an exclusive ``flock`` on a file; the lock dies with the holder, so a killed test run
    leaves nothing to clean up. Release with ``os.close(fd)``.
    """
    _DOMAIN_LOCKS.mkdir(parents=True, exist_ok=True)
    start = os.getpid() % len(_DOMAIN_IDS)
    for k in range(len(_DOMAIN_IDS)):
        did = _DOMAIN_IDS[(start + k) % len(_DOMAIN_IDS)]
        fd = os.open(_DOMAIN_LOCKS / f"{did}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return did, fd
    raise RuntimeError(f"all ROS domain ids {_DOMAIN_IDS.start}..{_DOMAIN_IDS.stop - 1} are held by other test runs")


@pytest.fixture(autouse=True)
def ros_domain_id(monkeypatch):
    """Every test gets its own ``ROS_DOMAIN_ID`` (inherited by the nodes and processes it starts), so
    concurrent test runs on one machine never see each other's topics."""
    did, fd = allocate_domain_id()
    monkeypatch.setenv("ROS_DOMAIN_ID", str(did))
    try:
        yield did
    finally:
        os.close(fd)


@pytest.fixture(scope="session")
def ur_emulator():
    """The UR controller emulator (``embeval.robot.ur_emulator``) on loopback for the whole session."""
    pytest.importorskip("embeval.robot.ur_emulator", reason="the UR emulator is not built yet")
    pytest.skip("the UR emulator fixture is not wired yet")
