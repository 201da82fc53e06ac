"""Run the UR emulator in a subprocess (what tests, benchmarks and HIL runs need): ``python -m
embeval.robot.ur_emulator``, which takes the arguments of ``embeval ur-emulator``.

ur_rtde's C++ calls hold the Python GIL while they wait for the controller, so an emulator in the
same process as the client would starve; a subprocess does not. ``EmulatorProcess()`` picks a free
loopback address (127.x.y.z) unless ``host`` is given, waits until the ports listen and keeps the
emulator's log lines in :attr:`EmulatorProcess.lines`.
"""
from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading

from embeval.errors import ServerUnavailableError
from embeval.robot.ur_emulator.server import DASHBOARD_PORT, RTDE_PORT, SCRIPT_PORT

PORTS = (RTDE_PORT, DASHBOARD_PORT, SCRIPT_PORT)


def ports_free(host: str) -> bool:
    """Whether the controller's three ports can be bound on ``host``."""
    for port in PORTS:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def free_loopback_host(tries: int = 50) -> str:
    """A random 127.x.y.z address whose controller ports are free (Linux routes all of 127/8 to loopback)."""
    rng = random.Random()
    for _ in range(tries):
        host = f"127.{rng.randint(1, 254)}.{rng.randint(0, 254)}.{rng.randint(2, 254)}"
        if ports_free(host):
            return host
    raise ServerUnavailableError("no free loopback address for the UR emulator's ports 30004/29999/30003")


class EmulatorProcess:
    """``python -m embeval.robot.ur_emulator --host HOST ARGS...`` as a child process; ``close()`` (or ``with``) stops it."""

    def __init__(self, *args: str, host: str | None = None, timeout: float = 30.0):
        self.host = host or free_loopback_host()
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "embeval.robot.ur_emulator", "--host", self.host, *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
        ready = threading.Event()

        def drain():
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if "Ctrl-C stops" in line:
                    ready.set()
            ready.set()

        self._drain = threading.Thread(target=drain, name="ur-emulator-log", daemon=True)
        self._drain.start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.close()
            raise ServerUnavailableError("the UR emulator (python -m embeval.robot.ur_emulator) did not start: " + " | ".join(self.lines[-5:]))

    def log(self) -> str:
        """Everything the emulator printed so far."""
        return "\n".join(self.lines)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._drain.join(2)  # the last lines (the emulator's summary) are in self.lines

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
