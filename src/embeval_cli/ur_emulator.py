"""``embeval ur-emulator``: a UR controller emulator for the unmodified ur_rtde client (rehearse a real-arm run).

The arguments and the handler are :mod:`embeval.robot.ur_emulator.command`'s (also ``python -m
embeval.robot.ur_emulator``)."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    from embeval.robot.ur_emulator import command

    command.add_arguments(sub.add_parser("ur-emulator", help=command.HELP, description=command.DESCRIPTION,
                                         epilog=command.EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter))
