"""Shared test setup: localhost-only DDS, offline hubs, hardware markers."""
from __future__ import annotations

import os

import pytest

import embeval  # noqa: F401  (applies the runtime defaults: DDS profile, offline hubs)


def pytest_collection_modifyitems(config, items):
    have_robot = bool(os.environ.get("UR_ROBOT_IP"))
    skip_hil = pytest.mark.skip(reason="hardware-in-the-loop: set UR_ROBOT_IP (and connect a RealSense) to run")
    for item in items:
        if "hil" in item.keywords and not have_robot:
            item.add_marker(skip_hil)


@pytest.fixture(scope="session")
def ur_emulator():
    """The UR controller emulator (``embeval.robot.ur_emulator``) on loopback for the whole session."""
    pytest.importorskip("embeval.robot.ur_emulator", reason="the UR emulator is not built yet")
    pytest.skip("the UR emulator fixture is not wired yet")
