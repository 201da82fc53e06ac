"""The dashboard server's commands (port 29999): one line in, one line out, as PolyScope 5 answers them.

A registry: exact commands (lower case) in :data:`COMMANDS`, commands with an argument in
:data:`PREFIXED`; each handler gets the controller, its config and the argument text and returns the
reply line. ``quit`` and ``shutdown`` close the connection after replying. Anything else is answered
``could not understand: '<line>'``, as the controller does.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from embeval.robot.ur_emulator.controller import (
    ROBOT_MODE_IDLE,
    ROBOT_MODE_NAMES,
    ROBOT_MODE_POWER_OFF,
    ROBOT_MODE_RUNNING,
    SAFETY_NORMAL,
    Controller,
    EmulatorConfig,
)

log = logging.getLogger("embeval.ur_emulator")

Handler = Callable[[Controller, EmulatorConfig, str], str]


def _version(cfg: EmulatorConfig) -> str:
    return ".".join(str(x) for x in cfg.version)


def _stop(ctrl: Controller, cfg, arg) -> str:
    ctrl.stop_program("dashboard stop")
    return "Stopped"


def _play(ctrl: Controller, cfg, arg) -> str:
    """Restarts the last control script, as pressing play on the program it became."""
    if ctrl.program is None and ctrl.last_script:
        ctrl.load_script(ctrl.last_script)
    return "Starting program" if ctrl.program is not None else "Failed to execute: play"


def _power_on(ctrl: Controller, cfg, arg) -> str:
    if ctrl.robot_mode == ROBOT_MODE_POWER_OFF:
        ctrl.robot_mode = ROBOT_MODE_IDLE
    return "Powering on"


def _power_off(ctrl: Controller, cfg, arg) -> str:
    ctrl.stop_program("power off")
    ctrl.motion = None
    ctrl.robot_mode = ROBOT_MODE_POWER_OFF
    return "Powering off"


def _brake_release(ctrl: Controller, cfg, arg) -> str:
    if ctrl.robot_mode == ROBOT_MODE_IDLE:
        ctrl.robot_mode = ROBOT_MODE_RUNNING
    return "Brake releasing"


def _restart_safety(ctrl: Controller, cfg, arg) -> str:
    ctrl.safety_mode = SAFETY_NORMAL
    ctrl.robot_mode = ROBOT_MODE_POWER_OFF
    ctrl.stop_program("restart safety")
    return "Restarting safety"


def _add_to_log(ctrl, cfg, arg) -> str:
    log.info("ur-emulator: log: %s", arg)
    return "Added log message"


COMMANDS: dict[str, Handler] = {
    "polyscopeversion": lambda c, cfg, a: f"URSoftware {_version(cfg)} (Jan 05 2024)",
    "version": lambda c, cfg, a: _version(cfg),
    "get serial number": lambda c, cfg, a: cfg.serial_number,
    "get robot model": lambda c, cfg, a: cfg.robot_model,
    "is in remote control": lambda c, cfg, a: "true",
    "robotmode": lambda c, cfg, a: f"Robotmode: {ROBOT_MODE_NAMES.get(c.robot_mode, c.robot_mode)}",
    "safetymode": lambda c, cfg, a: f"Safetymode: {c.safety_name()}",
    "safetystatus": lambda c, cfg, a: f"Safetystatus: {c.safety_name()}",
    "running": lambda c, cfg, a: f"Program running: {'true' if c.program is not None else 'false'}",
    "programstate": lambda c, cfg, a: f"{'PLAYING' if c.program is not None else 'STOPPED'} {c.loaded_program}",
    "get loaded program": lambda c, cfg, a: "No program loaded",
    "isprogramsaved": lambda c, cfg, a: f"true {c.loaded_program}",
    "get operational mode": lambda c, cfg, a: "NONE",
    "stop": _stop,
    "pause": lambda c, cfg, a: "Failed to execute: pause",
    "play": _play,
    "unlock protective stop": lambda c, cfg, a: c.unlock_protective_stop()[1],
    "close safety popup": lambda c, cfg, a: "closing safety popup",
    "close popup": lambda c, cfg, a: "closing popup",
    "power on": _power_on,
    "power off": _power_off,
    "brake release": _brake_release,
    "restart safety": _restart_safety,
    "quit": lambda c, cfg, a: "Disconnected",
    "shutdown": lambda c, cfg, a: "Shutting down",
}
PREFIXED: dict[str, Handler] = {
    "popup ": lambda c, cfg, a: "showing popup",
    "addtolog ": _add_to_log,
    "setuserrole ": lambda c, cfg, a: f"Setting user role: {a.strip()}",
    "load ": lambda c, cfg, a: f"File not found: {a.strip()}",
}
CLOSES = frozenset({"quit", "shutdown"})


def reply(ctrl: Controller, cfg: EmulatorConfig, line: str) -> tuple[str, bool]:
    """The reply to one command line (without its newline) and whether to close the connection."""
    cmd = line.lower()
    with ctrl.lock:
        handler, arg = COMMANDS.get(cmd), ""
        if handler is None:
            prefix = next((p for p in PREFIXED if cmd.startswith(p)), None)
            if prefix is not None:
                handler, arg = PREFIXED[prefix], line[len(prefix):]
        if handler is not None:
            return handler(ctrl, cfg, arg), cmd in CLOSES
    ctrl.refuse(f"dashboard: unknown command {line[:80]!r}")
    return f"could not understand: '{line}'", False
