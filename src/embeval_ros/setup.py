"""ament_python package for the embeval ROS 2 nodes (thin adapters over the embeval library).

Console scripts are the executables the launch files name (``ros2 run embeval_ros camera_node``): one per
``NODE = RosNode(...)`` record in the package's modules, read by :func:`entry_points` through
``embeval_ros/node_spec.py`` (loaded by path, standard library only: nothing is imported from the package).
Launch and parameter files live at the repository root (launch/, config/) and are installed into
share/embeval_ros when they are reachable (colcon build in ros2_ws/, or pip install from the repo).
"""
from glob import glob
from pathlib import Path

from setuptools import find_packages, setup

package_name = "embeval_ros"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository root (src/embeval_ros -> .)

def entry_points() -> dict[str, list[str]]:
    """``console_scripts``: ``executable = embeval_ros.<module>:main`` for every node record of the package."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("_embeval_ros_node_spec", HERE / package_name / "node_spec.py")
    node_spec = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
    spec.loader.exec_module(node_spec)
    return {"console_scripts": node_spec.console_scripts(node_spec.discover([HERE / package_name]))}


def _rel(pattern: str) -> list[str]:
    """Files under the repository root, as paths relative to this setup.py (setuptools wants relative paths)."""
    import os

    return sorted(os.path.relpath(p, HERE) for p in glob(str(ROOT / pattern)))


setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", _rel("launch/*.launch.py")),
        ("share/" + package_name + "/config", _rel("config/*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="embeval developers",
    maintainer_email="embeval@example.com",
    description="ROS 2 nodes for embeval: camera, distortion, policy, arm, scorer, recorder, conductor.",
    license="Apache-2.0",
    entry_points=entry_points(),
)
