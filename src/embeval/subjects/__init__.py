"""Subjects: the models under evaluation (VLMs, VLA policies, LLMs) behind small protocols."""
from embeval.subjects.protocols import LLM, VLM, Action, ActionSpec, Observation, Policy, check_image

__all__ = ["LLM", "VLM", "Action", "ActionSpec", "Observation", "Policy", "check_image"]
