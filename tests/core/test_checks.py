"""embeval.checks: one home of argument validation. The same bad value given to the CLI, a config dataclass field,
a ROS parameter and a safety limit is refused with the same core message; each check's boundaries."""
from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from embeval import checks
from embeval.config import from_mapping, opts
from embeval.errors import ConfigError
from embeval.robot.safety import SafetyLimits
from embeval.serving.limits import ServerLimits
from embeval.serving.command import body_mb
from embeval_cli import _util
from embeval_ros.runtime import typed

SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass
class _Conf:
    """A config with a port, a seed, a count and a rate, read strictly as a run spec is."""

    port: int = field(default=8000, metadata=opts(min=1, max=checks.MAX_PORT))
    seed: int = field(default=0, metadata=opts(min=0, max=checks.MAX_SEED))
    count: int = field(default=1, metadata=opts(min=1))
    rate: float = field(default=1.0, metadata=opts(min=0, max=10))


def _cli(parse, text: str) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as e:
        parse(text)
    return str(e.value)


def _config(name: str, value) -> str:
    with pytest.raises(ConfigError) as e:
        from_mapping(_Conf, {name: value}, "spec", strict=True)
    return str(e.value)


def _ros(value, default, lo=None, hi=None) -> str:
    with pytest.raises(ConfigError) as e:
        typed("node.x", value, default, lo, hi)
    return str(e.value)


@pytest.mark.parametrize("text, value, core", [
    ("70000", 70000, "must lie in 1..65535, got 70000"),
    ("0", 0, "must lie in 1..65535, got 0"),
    ("http", "http", "must be an integer in 1..65535, got 'http'"),
])
def test_a_bad_port_reads_the_same_from_cli_config_and_ros(text, value, core):
    cli = _cli(_util.port, text)
    assert cli == f"{core} (a TCP port)"  # argparse prefixes "argument --port: "
    assert _config("port", value) == f"spec.port: {core}"
    assert _ros(value, 8000, 1, checks.MAX_PORT).startswith(f"parameter node.x: {core}")
    assert str(_raises(checks.port, value, "--port")) == f"--port: {core} (a TCP port)"


@pytest.mark.parametrize("text, value, core", [
    ("-1", -1, "must lie in 0..2**63-1, got -1"),
    (str(2**63), 2**63, f"must lie in 0..2**63-1, got {2**63}"),
    ("1.5", 1.5, "must be an integer in 0..2**63-1, got"),
])
def test_a_bad_seed_reads_the_same_from_cli_config_and_ros(text, value, core):
    assert _cli(_util.seed, text).startswith(core)
    assert _config("seed", value).startswith(f"spec.seed: {core}")
    assert _ros(value, 0, 0, checks.MAX_SEED).startswith(f"parameter node.x: {core}")
    assert checks.seed(checks.MAX_SEED, "s") == 2**63 - 1 and checks.seed(0, "s") == 0


def test_a_zero_count_reads_the_same_from_cli_config_ros_and_server_limits():
    core = "must be >= 1, got 0"
    assert _cli(_util.positive_int, "0") == core
    assert _config("count", 0) == f"spec.count: {core}"
    assert _ros(0, 1, 1).startswith(f"parameter node.x: {core}")
    assert str(_raises(lambda v, w: ServerLimits(queue_size=v), 0, "")) == f"server limit queue_size: {core}"
    assert str(_raises(lambda v, w: ServerLimits(max_images=v), 1.5, "")) == \
        "server limit max_images: must be an integer >= 1, got 1.5"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_reads_the_same_everywhere(bad):
    shown = repr(bad)
    core = f"must be a finite number in 0.1..3600, got {shown}"
    assert _cli(_util.float_in(0.1, 3600), shown) == core
    assert _config("rate", bad) == f"spec.rate: must be a finite number in 0..10, got {shown}"
    assert _ros(bad, 1.0) == (f"parameter node.x: must be a finite number, got {shown}; write a plain number "
                              "(no quotes, not empty)")
    with pytest.raises(ConfigError) as e:
        SafetyLimits(max_tcp_speed=bad)
    assert str(e.value) == (f"safety limit max_tcp_speed: must be a finite number in (0, 3] m/s, got {shown}; "
                            "set max_tcp_speed to a value in that range")
    assert str(_raises(lambda v, w: ServerLimits(body_timeout_s=v), bad, "")) == \
        f"server limit body_timeout_s: must be a finite number > 0, got {shown}"


def test_ros_parameters_name_the_fix_for_a_wrong_type_and_the_range_for_a_wrong_value():
    assert _ros(-1, 0, 0) == "parameter node.x: must be >= 0, got -1"  # the range is the fix
    assert _ros("3", 0, 0, 9) == ("parameter node.x: must be an integer in 0..9, got '3'; write a plain whole number "
                                  "(no quotes, not empty)")
    assert _ros(10**400, 1.0) == ("parameter node.x: must be a finite number, got a 401-digit integer; write a plain "
                                  "number (no quotes, not empty)")
    assert typed("node.x", 30.0, 0, 0, 60) == 30 and typed("node.x", [1, 2], [0.0], 0, 2) == [1.0, 2.0]
    assert _ros([1, 3], [0.0], 0, 2) == "parameter node.x[1]: must lie in 0..2, got 3"


def test_safety_limit_ranges_and_vectors():
    with pytest.raises(ConfigError, match=r"^safety limit max_tcp_speed: must lie in \(0, 3\] m/s, got 0; set "):
        SafetyLimits(max_tcp_speed=0)
    assert SafetyLimits(max_tcp_speed=3).max_tcp_speed == 3.0  # the upper bound is included
    assert SafetyLimits(max_tcp_speed=np.float32(0.5)).max_tcp_speed == 0.5  # numpy scalars are numbers
    with pytest.raises(ConfigError, match=r"^safety limit max_tcp_speed: must be a finite number .*got True"):
        SafetyLimits(max_tcp_speed=True)
    with pytest.raises(ConfigError, match=r"^safety limit workspace_lower: must be 3 finite numbers, got \(0, 0\)"):
        SafetyLimits(workspace_lower=(0, 0))
    with pytest.raises(ConfigError, match=r"^safety limit joint_upper: must be 6 finite numbers"):
        SafetyLimits(joint_upper=[1.0] * 5 + [math.nan])
    assert SafetyLimits(workspace_lower=np.array([0.1, -0.5, 0.0])).workspace_lower == (0.1, -0.5, 0.0)


def _raises(check, value, where, *args, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        check(value, where, *args, **kw)
    return e.value


def test_integer_boundaries():
    assert checks.integer(1, "n", 1, 5) == 1 and checks.integer(5, "n", 1, 5) == 5
    assert type(checks.integer(np.int64(3), "n", 1, 5)) is int
    assert str(_raises(checks.integer, 0, "n", 1, 5)) == "n: must lie in 1..5, got 0"
    assert str(_raises(checks.integer, 6, "n", 1, 5)) == "n: must lie in 1..5, got 6"
    assert str(_raises(checks.integer, 6, "n", None, 5)) == "n: must be <= 5, got 6"
    for bad in (True, False, np.bool_(True), 2.0, math.nan, math.inf, "3", None, [3]):
        assert str(_raises(checks.integer, bad, "n", 1, 5)).startswith("n: must be an integer in 1..5, got ")
    assert str(_raises(checks.integer, 10**40, "n", 1, 5)) == "n: must lie in 1..5, got a 41-digit integer"
    assert checks.integer(10**40, "n") == 10**40  # unbounded: any size
    assert str(_raises(checks.integer, 7, "n", 1, 5, why="levels", fix="give 1..5")) == \
        "n: must lie in 1..5, got 7 (levels); give 1..5"


def test_number_boundaries():
    assert checks.number(0, "x", 0, 1) == 0.0 and checks.number(1, "x", 0, 1) == 1.0
    assert str(_raises(checks.number, 0, "x", 0, 1, lo_open=True)) == "x: must lie in (0, 1], got 0"
    assert str(_raises(checks.number, 0, "x", 0, lo_open=True, unit="s")) == "x: must be > 0 s, got 0"
    assert str(_raises(checks.number, -0.5, "x", 0)) == "x: must be >= 0, got -0.5"
    assert str(_raises(checks.number, 1.5, "x", 0, 1)) == "x: must lie in 0..1, got 1.5"
    for bad in (math.nan, math.inf, -math.inf, True, "1", None):
        assert str(_raises(checks.number, bad, "x", 0, 1)).startswith("x: must be a finite number in 0..1, got ")
    assert checks.number(2**70, "x") == float(2**70)
    assert str(_raises(checks.number, 2**70, "x", 0, 1e6)) == "x: must lie in 0..1000000, got 1180591620717411303424"
    assert str(_raises(checks.number, 10**400, "x", 0, 1e6)) == "x: must be a finite number in 0..1000000, got a 401-digit integer"
    assert checks.mib(1024, "m", 1024) == 1024.0
    assert str(_raises(checks.mib, 0, "--max-body-mb", 1024)) == "--max-body-mb: must lie in (0, 1024] MiB, got 0"


def test_vector_choice_flag_string():
    assert checks.vector([1, 2.5, np.float64(3)], "v", 3) == (1.0, 2.5, 3.0)
    assert checks.vector(np.zeros((1, 3)), "v", 3) == (0.0, 0.0, 0.0)
    for bad in ([1, 2], [1, 2, math.nan], [1, 2, "3"], [1, 2, True], "abc", None):
        assert str(_raises(checks.vector, bad, "v", 3)).startswith("v: must be 3 finite numbers, got ")
    assert checks.choice("a", "m", ("a", "b")) == "a"
    assert str(_raises(checks.choice, ["a"], "m", ("a", "b"), "mode")) == "m: unknown mode ['a']; choose from a, b"
    assert checks.flag(False, "f") is False
    for bad in (None, 0, 1, "true", ""):
        assert str(_raises(checks.flag, bad, "f")) == f"f: must be true or false, got {bad!r}"
    assert checks.string("", "s", empty=True) == ""
    assert str(_raises(checks.string, "  ", "s")) == "s: must be a non-empty string, got '  '"
    assert str(_raises(checks.string, 3, "s", empty=True)) == "s: must be a string, got 3"


def test_cli_types_answer_argparse_with_usage_and_exit_2(capsys):
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("--port", type=_util.port)
    p.add_argument("--mb", type=body_mb)
    assert p.parse_args(["--port", "65535", "--mb", "0.5"]).port == 65535
    for argv, msg in ((["--port", "70000"], "argument --port: must lie in 1..65535, got 70000 (a TCP port)"),
                      (["--mb", "big"], "argument --mb: must be a finite number in (0, 1024] MiB, got 'big'")):
        with pytest.raises(SystemExit) as e:
            p.parse_args(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.startswith("usage: t") and err.strip().endswith(f"t: error: {msg}")


# modules that may hold their own argparse error: the adapters of embeval/argtypes.py only
_ARGPARSE_HOME = {SRC / "embeval" / "argtypes.py"}
# a hand-written port or seed range test: a comparison with 65535, MAX_SEED or 2**63 (e.g. ``not 1 <= port <= 65535``)
_RANGE = re.compile(r"(<|>)=?\s*(65535|MAX_SEED|2\s*\*\*\s*63)\b")
# comparisons with those numbers that are not a CLI/config port or seed: 16-bit pixel values, an int64 episode id on
# the wire, and ManiSkill's window of episode seeds (seed .. seed + episodes - 1 within its 32-bit range)
_NOT_PORTS = {SRC / "embeval" / "image_io.py", SRC / "embeval" / "serving" / "openvla_server.py",
              SRC / "embeval" / "sim" / "maniskill" / "runtime.py"}


def test_no_module_defines_its_own_port_seed_or_argparse_check():
    argparse_errors, ranges = [], []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "ArgumentTypeError" in text and path not in _ARGPARSE_HOME:
            argparse_errors.append(str(path.relative_to(SRC)))
        if path != SRC / "embeval" / "checks.py" and path not in _NOT_PORTS and _RANGE.search(text):
            ranges.append(str(path.relative_to(SRC)))
    assert argparse_errors == [], f"argparse types outside embeval/argtypes.py: use its adapters ({argparse_errors})"
    assert ranges == [], f"port / seed ranges written outside embeval.checks: use checks.port / checks.seed ({ranges})"


def test_numpy_scalars_are_numbers_and_read_as_python_numbers():
    """Values read from arrays (a numpy speed, a limit from a config built with numpy) are checked like Python numbers
    and named as such in the message (``nan``, not ``np.float64(nan)``); numpy's bool is not a number."""
    assert checks.number(np.float32(0.5), "x", 0, 1) == 0.5 and checks.integer(np.int64(3), "n", 1, 5) == 3
    assert str(_raises(checks.number, np.float64("nan"), "x", 0, 1)) == "x: must be a finite number in 0..1, got nan"
    assert str(_raises(checks.integer, np.int64(9), "n", 1, 5)) == "n: must lie in 1..5, got 9"
    assert str(_raises(checks.number, np.bool_(True), "x")) == "x: must be a finite number, got True"


def test_strings_takes_lists_of_names_and_refuses_the_rest_in_one_bounded_line():
    assert checks.strings(["a", "b"], "x") == ("a", "b") and checks.strings((), "x", empty=True) == ()
    for bad in ("ab", [], ["a", ""], ["a", " "], ["a", 3], None, {"a": 1}):
        with pytest.raises(ConfigError, match=r"^x: must be a non-empty list of non-empty strings, got "):
            checks.strings(bad, "x")
    with pytest.raises(ConfigError) as e:
        checks.strings(["ok"] * 100_000 + [1], "x", fix="names")
    msg = str(e.value)
    assert len(msg) < 250 and msg.endswith("...; names") and "\n" not in msg
