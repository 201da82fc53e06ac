"""Nodes as separate processes, as ``ros2 launch`` starts them (used where ``ros2 launch`` is not installed).

Example::

    with NodeProcesses(log_dir="logs") as procs:
        procs.start("embeval_arm", [sys.executable, "-m", "embeval_ros.arm_node", "--ros-args", "--params-file", "p.yaml"])
        procs.wait_until(lambda: Path("episodes.jsonl").exists(), timeout_s=60)
"""
from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

from embeval.errors import EmbevalError


class NodeProcesses:
    """Start node processes (each logging to ``log_dir/<name>.log``); on exit terminate them (SIGTERM, then
    SIGKILL after ``grace_s`` seconds)."""

    def __init__(self, log_dir: str | os.PathLike, grace_s: float = 10.0):
        self.log_dir, self.grace_s = Path(log_dir), grace_s
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, cmd: Sequence[str], cwd: str | os.PathLike | None = None, env: dict | None = None) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}.log").open("w") as log:
            self.procs[name] = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)

    def wait_until(self, done: Callable[[], bool], timeout_s: float, poll_s: float = 0.5) -> bool:
        """Poll ``done`` until it holds (True) or ``timeout_s`` passes (False); a node that exits meanwhile is an error."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if done():
                return True
            exited = [n for n, p in self.procs.items() if p.poll() is not None]
            if exited:
                raise EmbevalError(f"node process(es) {', '.join(exited)} exited; see {self.log_dir}/<name>.log")
            time.sleep(poll_s)
        return done()

    def close(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
