"""Closed-loop step logic shared by the ROS nodes and offline runners (pure Python, no rclpy).

- :mod:`~embeval.control.watchdog`: staleness of inputs (images, instructions, commands);
- :mod:`~embeval.control.policy_step`: one guarded policy step (watchdogs, clipping, dry run);
- :mod:`~embeval.control.arm_step`: one guarded arm step (delta -> target, limits, protective stop);
- :mod:`~embeval.control.episodes`: pair distorted episodes with their reference; Decision/Execution scores;
- :mod:`~embeval.control.conductor`: the conductor's episode state machine, TCP cube estimate and verdict sources.

The arms they drive are :mod:`embeval.robot` backends (sim, mock, ur_rtde).
"""
from embeval.control.arm_step import ArmCommander, ArmStepResult, ur_safety_mode
from embeval.control.episodes import EpisodeBook, score_pair
from embeval.control.policy_step import PolicyStep, PolicyStepper, StepperConfig, clip_action
from embeval.control.watchdog import Watchdog

__all__ = ["ArmCommander", "ArmStepResult", "EpisodeBook", "PolicyStep", "PolicyStepper", "StepperConfig",
           "Watchdog", "clip_action", "score_pair", "ur_safety_mode"]
