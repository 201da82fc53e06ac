"""The core's own ``python -m`` entry points (started as child processes by the core, which never names the
``embeval`` command): the UR emulator's arguments are defined once and parsed the same by both."""
from __future__ import annotations

import argparse
import subprocess
import sys

from embeval.robot.ur_emulator import command


def _options(p: argparse.ArgumentParser) -> dict[str, tuple]:
    return {a.dest: (tuple(a.option_strings), a.default, a.nargs, a.type) for a in p._actions if a.dest != "help"}


def test_ur_emulator_arguments_are_defined_once():
    from embeval_cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    cli = sub.choices["ur-emulator"]
    assert _options(cli) == _options(command.parser())
    assert cli.get_default("func") is command.run and "--workspace-lower" in cli.format_help()
    args = command.parser().parse_args(["--host", "127.0.0.9", "--rate", "250", "--workspace-lower", "0.2", "-0.3", "0"])
    assert (args.host, args.rate, args.workspace_lower, args.unlock_delay) == ("127.0.0.9", 250.0, [0.2, -0.3, 0.0], 5.0)


def test_ur_emulator_entry_point_reports_a_user_error_in_one_line():
    out = subprocess.run([sys.executable, "-m", "embeval.robot.ur_emulator", "--rate", "5000"], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == "python -m embeval.robot.ur_emulator: error: --rate 5000.0 must lie in [1, 1000] Hz"


def test_emulator_process_starts_the_core_entry_point():
    from embeval.robot.ur_emulator import EmulatorProcess

    with EmulatorProcess("--quiet", "--rate", "100") as emu:
        assert emu.proc.args[1:3] == ["-m", "embeval.robot.ur_emulator"] and "embeval_cli" not in emu.proc.args
        assert any("ur-emulator: UR5 controller" in line for line in emu.lines)
    assert emu.proc.returncode is not None and "stopped after" in emu.log()
