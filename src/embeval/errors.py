"""Error types. Every error names the problem and the fix; the CLI prints them without a traceback."""
from __future__ import annotations


class EmbevalError(Exception):
    """Base class: a user-facing error with a message that says what to do."""


class ConfigError(EmbevalError, ValueError):
    """A malformed spec or configuration; the message names the offending field."""


class MissingFileError(EmbevalError, FileNotFoundError):
    """A file the user must provide (weights, dataset, image folder) is missing."""


class MissingWeightsError(MissingFileError):
    """Model weights that cannot be downloaded here are not present locally."""


class ServerUnavailableError(EmbevalError, ConnectionError):
    """A model server (OpenAI-compatible, OpenVLA REST) cannot be reached or failed."""


class InvalidInputError(EmbevalError, ValueError):
    """Bad data: corrupt image, NaN action, wrong shape or dtype."""


class ContextLengthError(InvalidInputError):
    """A prompt (plus the tokens asked for) does not fit the model's context window."""


class SafetyError(EmbevalError, RuntimeError):
    """A command was refused or the arm stopped for safety (limits, watchdog, protective stop)."""


def yaml_problem(exc: Exception) -> str:
    """A YAML parser error in one line: ``line L, column C: <problem>`` (PyYAML's own message spans 6 lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem
