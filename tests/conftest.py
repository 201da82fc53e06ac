"""Shared test setup: localhost-only DDS, offline hubs, hardware markers."""
from __future__ import annotations

import os

import pytest

from embeval.env import configure

configure()  # the runtime defaults every embeval program sets: localhost DDS profile, offline hubs, Agg


def pytest_collection_modifyitems(config, items):
    have_robot = bool(os.environ.get("UR_ROBOT_IP"))
    skip_hil = pytest.mark.skip(reason="hardware-in-the-loop: set UR_ROBOT_IP (and connect a RealSense) to run")
    for item in items:
        if "hil" in item.keywords and not have_robot:
            item.add_marker(skip_hil)
