"""ament_python package for the embeval ROS 2 nodes (thin adapters over the embeval library)."""
from glob import glob

from setuptools import find_packages, setup

package_name = "embeval_ros"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", glob("launch/*.py")),
        ("share/" + package_name + "/config", glob("config/*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="embeval developers",
    maintainer_email="embeval@localhost",
    description="ROS 2 nodes for embeval: camera, distortion, policy, arm, scorer, recorder.",
    license="Apache-2.0",
    entry_points={"console_scripts": []},
)
