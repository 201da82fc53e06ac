"""``embeval operator``: answer the conductor on a real cell with one key (y success, n failure, Enter next)."""
from __future__ import annotations

import argparse

from embeval_cli._util import float_in


def register(sub) -> None:
    p = sub.add_parser(
        "operator", help="operator console: one key answers the conductor (y success, n failure, Enter next, q quit)",
        description="Send the operator's verdict on the episode that just ended (y/n: /embeval/conductor/success, "
                    "recorded as success_source operator) or confirm the cell is set up (Enter: /embeval/conductor/next). "
                    "Run it beside `ros2 launch` / `embeval graph` with operator_confirm:=true.",
        epilog="examples:\n  embeval operator\n  echo y | embeval operator          # one answer from a script\n\n"
               "exit status: 0 when every answer reached the conductor and was accepted; 2 when one was not "
               "delivered\n(no conductor within --timeout, no reply, an unknown key) or the conductor refused it "
               "(nothing awaited it).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timeout", type=float_in(0, 3600, "s", lo_open=True), default=5.0,
                   help="seconds to wait for the conductor's service, in (0, 3600] (default 5)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    import rclpy
    from embeval_ros.operator import OperatorConsole, read_keys, run

    import embeval  # noqa: F401  (localhost DDS defaults before rclpy)

    rclpy.init()
    console = OperatorConsole(timeout_s=args.timeout)
    try:
        return run(read_keys(), console)
    except KeyboardInterrupt:
        return 0
    finally:
        console.close()
        if rclpy.ok():
            rclpy.shutdown()
