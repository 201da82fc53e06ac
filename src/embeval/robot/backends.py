"""The arm-backend registry: backend name -> factory ``(limits=SafetyLimits, **backend kwargs) -> ArmBackend``.

Built-in here: ``mock`` (:class:`embeval.robot.mock_backend.MockArm`) and ``ur_rtde``
(:class:`embeval.robot.ur_rtde_backend.URRtdeArm`). A layer built on ``embeval.robot`` registers its own
backends when it is imported: :mod:`embeval.sim` adds ``sim`` (the pybullet workcell). An installed package adds
one through the entry-point group ``embeval.arm_backends`` (``my_arm = "my_pkg.arm:MyArm"``). The ROS arm node
(``backend`` parameter) and ``embeval graph`` build their arm with :func:`make_backend`. No ROS import here.
"""
from __future__ import annotations

from typing import Any

from embeval.errors import ConfigError
from embeval.registry import Registry

ARM_BACKENDS: Registry = Registry(
    "arm backend", group="embeval.arm_backends",
    hint="register one with embeval.robot.backends.ARM_BACKENDS.register(name, factory)",
    entries={"mock": "embeval.robot.mock_backend:MockArm", "ur_rtde": "embeval.robot.ur_rtde_backend:URRtdeArm"})


def make_backend(name: str, limits, **kw: Any):
    """Build arm backend ``name`` with safety ``limits`` and its keyword arguments; an unknown name is a
    ConfigError (did you mean, the choices), one whose package is missing says so and offers ``mock``."""
    if name not in ARM_BACKENDS:
        raise ARM_BACKENDS.unknown(name, "backend")
    try:
        factory = ARM_BACKENDS.get(name)
    except (ConfigError, AttributeError) as exc:
        raise ConfigError(f"arm backend {name!r} is not available here ({exc}); use backend:=mock") from None
    return factory(limits=limits, **kw)
