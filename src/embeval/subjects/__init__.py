"""Subjects: the models under evaluation (VLMs, VLA policies, LLMs) behind small protocols.

Load any subject from a YAML spec with :func:`load_subject`; add an adapter with
:func:`register_adapter`. Adapters import their heavy packages only when used.
"""
from embeval.action import Action, ActionSpec, Observation, check_image
from embeval.subjects.protocols import LLM, VLM, Policy
from embeval.subjects.registry import (
           SubjectSpec,
           list_adapters,
           load_subject,
           read_spec,
           register_adapter,
)

__all__ = ["LLM", "VLM", "Action", "ActionSpec", "Observation", "Policy", "check_image",
           "SubjectSpec", "list_adapters", "load_subject", "read_spec", "register_adapter"]
