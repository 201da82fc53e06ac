"""ManiSkill3 as a simulator backend of embeval (CPU physics and software rendering, offline).

Importing this package sets the process environment ManiSkill needs (:mod:`.runtime`: the
software Vulkan driver unless the machine has its own, ``MS_ASSET_DIR`` inside the environment,
no download prompt); ``mani_skill`` itself is imported only when an env is built.

- :mod:`~embeval.sim.maniskill.runtime`: environment variables, Vulkan check and diagnosis
"""
from embeval.sim.maniskill.runtime import VulkanUnavailableError, check_vulkan, configure

configure()

__all__ = ["VulkanUnavailableError", "check_vulkan", "configure"]
