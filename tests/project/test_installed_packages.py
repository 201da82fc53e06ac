"""The install step provides every package the suite needs.

Several tests use ``pytest.importorskip`` so that a partial install outside the project still runs
what it can; here a missing package is a failure, so a broken install step can never turn into
silently skipped tests in CI."""
import importlib

import pytest

REQUIRED = ["torch", "torchvision", "transformers", "ray", "rclpy", "std_msgs.msg", "sensor_msgs.msg",
            "lerobot", "json_numpy", "llama_cpp", "pybullet", "ikpy", "pyiqa", "rosbags", "pycocoevalcap",
            "statsmodels", "sentence_transformers"]


@pytest.mark.parametrize("module", REQUIRED)
def test_project_dependency_is_installed(module):
    importlib.import_module(module)
