"""Robot demonstration datasets in the LeRobot format (v3.0): writing, reading, validation,
and recording from the simulator's scripted expert (:mod:`embeval.datasets.demos`)."""
from embeval.datasets.lerobot_format import Feature, LeRobotEpisodes, LeRobotWriter, read_lerobot, validate_layout

__all__ = ["Feature", "LeRobotEpisodes", "LeRobotWriter", "read_lerobot", "validate_layout"]
