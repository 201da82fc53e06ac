"""embeval.sim: the simulated UR5 workcell (pybullet), tasks, scripted expert, reference images.

- :mod:`~embeval.sim.scene`: plain-data scene specs (dataclasses <-> dict/YAML)
- :mod:`~embeval.sim.objects`: procedural object builders (cubes, bowls, cards with image textures, buttons, drawers, ...)
- :mod:`~embeval.sim.tasks`: the ten verbs, success predicates, seeded scene generators
- :mod:`~embeval.sim.workcell`: the pybullet cell (robot, physics, safety, cameras)
- :mod:`~embeval.sim.env`: ``SimEnv.reset(seed, task)`` / ``step(action)`` episodes
- :mod:`~embeval.sim.expert`: the scripted expert
- :mod:`~embeval.sim.execute`: run action sequences and score Execution
- :mod:`~embeval.sim.references`: the Embodied-IQA reference-image generator

See docs/sim.md.
"""
from embeval.robot.backends import ARM_BACKENDS
from embeval.sim.env import SimEnv
from embeval.sim.episode_env import StepResult
from embeval.sim.scene import VERBS, CameraSpec, LightingSpec, ObjectSpec, SceneSpec
from embeval.sim.tasks import TaskSpec, WorldState, make_reference_scene, make_task
from embeval.sim.workcell import SimConfig, Workcell

# the pybullet workcell as an arm backend (embeval.robot.backends; imported on first use)
ARM_BACKENDS.register("sim", "embeval.sim.arm_backend:SimArmBackend", description="the pybullet workcell (embeval.sim)")
ARM_BACKENDS.register("libero", "embeval.sim.libero.arm:LiberoArm",
                      description="a LIBERO task in its own interpreter (embeval.sim.libero.arm)")

__all__ = [
    "VERBS",
    "CameraSpec",
    "LightingSpec",
    "ObjectSpec",
    "SceneSpec",
    "SimConfig",
    "SimEnv",
    "StepResult",
    "TaskSpec",
    "Workcell",
    "WorldState",
    "make_reference_scene",
    "make_task",
]
