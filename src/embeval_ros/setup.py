"""ament_python package for the embeval ROS 2 nodes (thin adapters over the embeval library).

Console scripts are the executables the launch files name (``ros2 run embeval_ros camera_node``).
Launch and parameter files live at the repository root (launch/, config/) and are installed into
share/embeval_ros when they are reachable (colcon build in ros2_ws/, or pip install from the repo).
"""
from glob import glob
from pathlib import Path

from setuptools import find_packages, setup

package_name = "embeval_ros"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository root (src/embeval_ros -> .)

#: executable name -> node module (each module has main())
EXECUTABLES = {
    "camera_node": "camera_node",
    "distortion_node": "distortion_node",
    "policy_node": "policy_node",
    "arm_node": "arm_node",
    "scorer_node": "scorer_node",
    "recorder_node": "recorder_node",
    "conductor_node": "conductor_node",
    "echo_node": "echo_node",
}


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
    entry_points={
        "console_scripts": [f"{exe} = {package_name}.{mod}:main" for exe, mod in EXECUTABLES.items()],
    },
)
