"""The UR emulator's command line, defined once: ``embeval ur-emulator`` and ``python -m embeval.robot.ur_emulator``
(what :class:`~embeval.robot.ur_emulator.process.EmulatorProcess` starts) parse the same arguments."""
from __future__ import annotations

import argparse
from pathlib import Path

from embeval.entry import run_entry

HELP = "emulate a UR5 controller (RTDE, dashboard, script port) for ur_rtde"
DESCRIPTION = ("Serve what a UR e-Series controller serves to the ur_rtde client library: RTDE (30004) at 500 Hz, the "
               "dashboard server (29999) and the script port (30003). ur_rtde's control script is recognised and its "
               "register protocol executed (moveJ/moveL/speed*/servo*/stop*/watchdog, digital outputs); other URScript "
               "is refused. Protective stops on the table plane, the workspace box and joint limits. Runs until Ctrl-C.")
EPILOG = """example:
  embeval ur-emulator                                  # RTDE 30004, dashboard 29999, script 30003 on 127.0.0.1
  embeval ur-emulator --host 127.0.0.2 --unlock-delay 1
  embeval ur-emulator --workspace-lower 0.25 -0.35 0.05 --workspace-upper 0.75 0.35 0.5   # the cell's box
  embeval ur-emulator --params config/embeval_ur5.yaml           # the box the arm node is configured with

then point the robot at it, e.g. robot_ip: 127.0.0.1 in config/embeval_ur5.yaml, or
  python -c "import rtde_receive; print(rtde_receive.RTDEReceiveInterface('127.0.0.1').getActualQ())" """


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the emulator's options to ``p`` and make :func:`run` its ``func``; returns ``p``."""
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; use 127.0.0.2 ... when the ports are taken)")
    p.add_argument("--version", dest="controller_version", default="5.15.0.116447",
                   help="controller / PolyScope version to report, major.minor.bugfix.build (default 5.15.0.116447)")
    p.add_argument("--workspace-lower", nargs=3, type=float, metavar=("X", "Y", "Z"),
                   help="TCP workspace box lower corner, frame base, metres (default: embeval's SafetyLimits)")
    p.add_argument("--workspace-upper", nargs=3, type=float, metavar=("X", "Y", "Z"),
                   help="TCP workspace box upper corner, frame base, metres")
    p.add_argument("--params", type=Path, metavar="YAML",
                   help="take the workspace box from the arm node's parameters in this ROS 2 parameter file "
                        "(embeval_arm: workspace_lower/workspace_upper), e.g. config/embeval_ur5.yaml")
    p.add_argument("--table-z", type=float, default=0.0,
                   help="table plane height in frame base (m); nothing may go below it (default 0)")
    p.add_argument("--no-table", action="store_true", help="no table plane check")
    p.add_argument("--home", nargs=6, type=float, metavar="P",
                   help="start TCP pose x y z rx ry rz (frame base; default 0.45 0 0.30 3.1416 0 0)")
    p.add_argument("--tcp", nargs=6, type=float, metavar="T",
                   help="TCP offset from the flange (tool0) x y z rx ry rz, as set on the pendant "
                        "(default: none, the TCP is tool0; the gripper's is 0 0 0.14 0 0 0)")
    p.add_argument("--unlock-delay", type=float, default=5.0,
                   help="seconds a protective stop lasts before the dashboard can unlock it (real controller: 5)")
    p.add_argument("--rate", type=float, default=500.0, help="control and RTDE rate in Hz (default 500)")
    p.add_argument("--quiet", action="store_true", help="log only errors")
    p.set_defaults(func=run)
    return p


def parser(prog: str = "python -m embeval.robot.ur_emulator") -> argparse.ArgumentParser:
    """The emulator's own parser (its ``python -m`` entry point)."""
    return add_arguments(argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG,
                                                 formatter_class=argparse.RawDescriptionHelpFormatter))


def main(argv: list[str] | None = None) -> int:
    """``python -m embeval.robot.ur_emulator ARGS``: exit 0, 2 on a usage error."""
    return run_entry(parser(), argv)


def run(args: argparse.Namespace) -> int:
    """Start the emulator that ``args`` (:func:`add_arguments`) describe and serve until SIGTERM or Ctrl-C; exit code."""
    import logging
    import signal
    import threading

    from embeval.errors import ConfigError
    from embeval.robot.safety import SafetyLimits
    from embeval.robot.ur_emulator.controller import EmulatorConfig
    from embeval.robot.ur_emulator.server import URControllerEmulator

    try:
        version = tuple(int(x) for x in args.controller_version.split("."))
    except ValueError:
        version = ()
    if len(version) != 4 or version[0] not in (3, 5):
        raise ConfigError(f"--version {args.controller_version!r} must be major.minor.bugfix.build with major 3 "
                          "(CB3) or 5 (e-Series), e.g. 5.15.0.116447")
    if not 1 <= args.rate <= 1000:
        raise ConfigError(f"--rate {args.rate} must lie in [1, 1000] Hz")
    if args.unlock_delay < 0:
        raise ConfigError(f"--unlock-delay {args.unlock_delay} must be >= 0 seconds")
    lim = {}
    if args.params:
        from embeval.errors import load_yaml

        doc = load_yaml(args.params, "parameter file") or {}
        arm = ((doc.get("embeval_arm") or {}).get("ros__parameters") or {}) if isinstance(doc, dict) else {}
        for key in ("workspace_lower", "workspace_upper"):
            if key in arm:
                lim[key] = tuple(arm[key])
        if not lim:
            raise ConfigError(f"{args.params} has no embeval_arm.ros__parameters.workspace_lower/upper; give the box "
                              "with --workspace-lower/--workspace-upper instead")
    if args.workspace_lower:
        lim["workspace_lower"] = tuple(args.workspace_lower)
    if args.workspace_upper:
        lim["workspace_upper"] = tuple(args.workspace_upper)
    cfg = EmulatorConfig(version=version, limits=SafetyLimits(**lim), table_z=None if args.no_table else args.table_z,
                         unlock_delay=args.unlock_delay, rate_hz=args.rate)
    if args.home:
        cfg.home_tcp = tuple(args.home)
    if args.tcp:
        from embeval.kinematics.transforms import pose_to_matrix

        cfg.tool = pose_to_matrix(args.tcp)
    logging.basicConfig(level=logging.ERROR if args.quiet else logging.INFO, format="%(asctime)s %(message)s")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())  # before the ready line: a parent may stop it at once
    emu = URControllerEmulator(args.host, cfg)
    emu.start()
    ctrl = emu.controller
    print(f"ur-emulator: UR5 controller {args.controller_version} on {args.host} (RTDE {emu.ports['rtde']}, dashboard "
          f"{emu.ports['dashboard']}, script {emu.ports['script']}); TCP {[round(float(x), 4) for x in ctrl.tcp_pose]}; "
          "Ctrl-C stops", flush=True)
    try:
        while not done.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        emu.stop()
        print(f"ur-emulator: stopped after {emu.ticks} control cycles ({emu.achieved_rate:.1f} Hz)", flush=True)
    return 0
