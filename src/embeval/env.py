"""Process-wide runtime defaults: localhost-only DDS, offline model hubs.

``import embeval`` changes nothing in ``os.environ``. The programs embeval starts call
:func:`configure` once, explicitly, before any rclpy import: the ``embeval`` CLI, every ROS 2 node
(``embeval_ros.runtime.run_node``), the benchmarks and the test configuration. Child processes
inherit the variables, so DDS discovery and traffic stay on loopback unless the user opts out.
A library user (a notebook) who wants the same defaults calls ``embeval.env.configure()`` too.

Opt out on a real robot network with ``EMBEVAL_DDS_LOCALHOST=0`` (then the
usual ROS 2 variables apply unchanged), or point
``FASTDDS_DEFAULT_PROFILES_FILE`` at your own profile (it is never overridden).
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: The shipped Fast DDS participant profile: SHM + UDPv4 on 127.0.0.1 only.
DDS_PROFILE = PACKAGE_DIR / "data" / "dds" / "fastdds_localhost.xml"


def dds_localhost_enabled(environ: dict | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("EMBEVAL_DDS_LOCALHOST", "1").strip().lower() not in {"0", "false", "no", "off"}


def dds_environment(environ: dict | None = None) -> dict[str, str]:
    """The variables a localhost-only ROS 2 process needs (empty when opted out)."""
    env = os.environ if environ is None else environ
    if not dds_localhost_enabled(env):
        return {}
    return {
        "FASTDDS_DEFAULT_PROFILES_FILE": env.get("FASTDDS_DEFAULT_PROFILES_FILE", str(DDS_PROFILE)),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": env.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST"),
        "RMW_IMPLEMENTATION": env.get("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp"),
    }


def configure() -> None:
    """Set the DDS, offline-hub and plotting defaults in ``os.environ`` without overriding user choices.

    Sets (only where unset): the variables of :func:`dds_environment`, ``HF_HUB_OFFLINE=1``,
    ``TRANSFORMERS_OFFLINE=1`` and ``MPLBACKEND=Agg``. Idempotent.
    """
    for key, value in dds_environment().items():
        os.environ.setdefault(key, value)
    # No internet: never try to reach a model hub at run time.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("MPLBACKEND", "Agg")
