"""Error types. Every error names the problem and the fix; the CLI prints them without a traceback."""
from __future__ import annotations


class EmbevalError(Exception):
    """Base class: a user-facing error with a message that says what to do."""


class ConfigError(EmbevalError, ValueError):
    """A malformed spec or configuration; the message names the offending field."""


class NotApplicableError(ConfigError):
    """A perturbation the current scene cannot take (a table texture in a scene without a table, ...); a study
    skips that cell and says so instead of stopping."""


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


#: the largest hand-written text file (spec, subject, scene, parameters) read; a bigger one is a wrong file
MAX_TEXT_BYTES = 16 << 20


def read_text(path, what: str = "file", max_bytes: int = MAX_TEXT_BYTES, utf8_fix: str = "") -> str:
    """The contents of a UTF-8 text file. :class:`ConfigError` in one line naming ``what`` and the file when
    it is larger than ``max_bytes`` or not UTF-8 (a binary or a UTF-16 file given by mistake; ``utf8_fix``
    replaces the advice to save it as UTF-8, e.g. for a file a program wrote); OSError as is."""
    from pathlib import Path

    p = Path(path)
    with open(p, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {p} is larger than {max_bytes >> 20} MiB; give the small YAML/JSON text file, "
                          "not a data or weights file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {p} is not UTF-8 text ({unicode_problem(exc, data)}); "
                          f"{utf8_fix or 'save it as UTF-8 (or check that it is the right file, not a binary)'}") from None


def unicode_problem(exc: UnicodeDecodeError, data: bytes | None = None) -> str:
    """Where a UTF-8 decoding failed: ``byte 0xff at line L, column C`` (line/column when ``data`` is given)."""
    obj = data if data is not None else exc.object
    bad = obj[exc.start:exc.start + 1]
    where = f"byte 0x{bad.hex()} at offset {exc.start}"
    if data is not None:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        where = f"byte 0x{bad.hex()} at line {line}, column {col}"
    return where


def load_yaml(path, what: str = "file", fix: str = "", missing: str = ""):
    """Parse a YAML text file (see :func:`read_text`) with :class:`embeval.safe_yaml.SafeLoader` (bounded aliases,
    nesting and integers); :class:`ConfigError` with the position of a syntax error or a bound, ending in ``fix``.
    ``missing``: the :class:`MissingFileError` message when ``path`` does not exist."""
    from pathlib import Path

    import yaml

    if Path(path).is_dir():
        raise ConfigError(f"{what} {path} is a folder, not a file; give the {what} YAML file itself")
    if missing and not Path(path).is_file():
        raise MissingFileError(missing)
    from embeval.safe_yaml import YAMLLimitError, loads

    text = read_text(path, what)
    try:
        return loads(text)  # yaml.safe_load with bounds on aliases, nesting and integer digits
    except yaml.YAMLError as exc:
        verdict = "is refused" if isinstance(exc, YAMLLimitError) else "is not valid YAML"
        raise ConfigError(f"{what} {path} {verdict} ({yaml_problem(exc)}){f'; {fix}' if fix else ''}") from None


def read_json(path, what: str = "file", fix: str = "", max_bytes: int = MAX_TEXT_BYTES, mapping: bool = True,
              utf8_fix: str = ""):
    """Parse a JSON text file (see :func:`read_text`). :class:`ConfigError` in one line, ending in ``fix``, when it is
    empty, not valid JSON (with the position) or, with ``mapping``, not a JSON object."""
    import json

    text = read_text(path, what, max_bytes, utf8_fix)
    tail = f"; {fix}" if fix else ""
    if not text.strip():
        raise ConfigError(f"{what} {path} is empty{tail}")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{what} {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}){tail}") from None
    if mapping and not isinstance(doc, dict):
        raise ConfigError(f"{what} {path} is a JSON {type(doc).__name__}, not an object{tail}")
    return doc


def read_jsonl(path, what: str = "file", fix: str = "", missing: str = "", max_bytes: int = 1 << 30,
               utf8_fix: str = "") -> list[tuple[int, dict]]:
    """The records of a JSON-lines text file (see :func:`read_text`) as ``(line number, object)``, blank lines
    skipped. ``missing``: the :class:`MissingFileError` message when ``path`` is not a file; :class:`ConfigError`
    in one line naming the file and line, ending in ``fix``, when a line is not valid JSON or not an object."""
    from pathlib import Path

    if missing and not Path(path).is_file():
        raise MissingFileError(missing)
    return jsonl_records(read_text(path, what, max_bytes, utf8_fix), f"{what} {path}", fix)


def jsonl_records(text: str, where: str, fix: str = "") -> list[tuple[int, dict]]:
    """The records of JSON-lines ``text`` as ``(line number, object)``, blank lines skipped; :class:`ConfigError`
    in one line (``where`` line N ..., ending in ``fix``) for a line that is not valid JSON or not an object."""
    import json

    tail = f"; {fix}" if fix else ""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{where} line {n} is not valid JSON ({exc.msg}){tail}") from None
        if not isinstance(rec, dict):
            raise ConfigError(f"{where} line {n} is a JSON {type(rec).__name__}, not an object{tail}")
        out.append((n, rec))
    return out


def check_out_dir(path, option: str = "--out") -> None:
    """Before a long computation: :class:`ConfigError` in one line naming ``option`` when the output folder ``path``
    could not be created or written (a file stands there or on the way, no permission, a read-only or virtual file
    system such as /proc). Nothing is left behind: the nearest existing folder is probed with a temporary file."""
    import os
    import tempfile
    from pathlib import Path

    p = Path(os.path.expanduser(str(path))).absolute()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{option} {path} is a file, not a folder; choose a folder")
    base = p
    while not base.exists():
        base = base.parent
    if not base.is_dir():
        raise ConfigError(f"{option} {path}: {base} is a file, not a folder; choose another output folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".embeval-write-test-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot write in {base} ({exc.strerror or exc}); choose another output "
                          "folder") from None


def check_out_file(path, option: str = "--out") -> None:
    """Before a long computation: :class:`ConfigError` in one line naming ``option`` when the output file ``path``
    could not be written (it is a folder, or its folder cannot be created or written: :func:`check_out_dir`)."""
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{option} {path} is a folder; give a file name")
    check_out_dir(p.parent, f"{option} {path}: folder")
