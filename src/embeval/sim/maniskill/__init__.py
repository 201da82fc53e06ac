"""ManiSkill3 as a simulator backend of embeval (CPU physics and software rendering, offline).

Importing this package changes nothing; building an env first sets the process environment ManiSkill
needs (:func:`.runtime.configure`: the software Vulkan driver unless the machine has its own,
``MS_ASSET_DIR`` inside the environment, no download prompt) and only then imports ``mani_skill``.

- :mod:`~embeval.sim.maniskill.runtime`: environment variables, Vulkan check and diagnosis
"""
from embeval.sim.maniskill.runtime import VulkanUnavailableError, check_vulkan, configure

__all__ = ["VulkanUnavailableError", "check_vulkan", "configure"]
