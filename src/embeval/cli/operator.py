"""``embeval operator``: answer the conductor on a real cell with one key (y success, n failure, Enter next)."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser(
        "operator", help="operator console: one key answers the conductor (y success, n failure, Enter next, q quit)",
        description="Send the operator's verdict on the episode that just ended (y/n: /embeval/conductor/success, "
                    "recorded as success_source operator) or confirm the cell is set up (Enter: /embeval/conductor/next). "
                    "Run it beside `ros2 launch` / `embeval graph` with operator_confirm:=true.",
        epilog="examples:\n  embeval operator\n  echo y | embeval operator          # one answer from a script",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the conductor's service (default 5)")
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
