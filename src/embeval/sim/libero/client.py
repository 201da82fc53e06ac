"""The embeval side of the LIBERO worker: start ``.venv-libero/bin/python worker.py``, send requests, get replies."""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from embeval.errors import ConfigError, EmbevalError, NotApplicableError
from embeval.sim.libero import check_installed
from embeval.sim.libero.worker import read_frame, write_frame

WORKER = Path(__file__).with_name("worker.py")


class LiberoWorkerError(EmbevalError, RuntimeError):
    """The worker failed (crashed, or LIBERO raised); the message carries the tail of its log."""


class LiberoWorker:
    """One worker process (one LIBERO environment). ``call(op, arrays=None, **fields) -> (header, arrays)``."""

    def __init__(self, python: Path | None = None):
        py = python or check_installed()
        self.log = tempfile.NamedTemporaryFile(prefix="embeval-libero-", suffix=".log", delete=False)  # noqa: SIM115 -- lives with the worker
        env = dict(os.environ)
        env.setdefault("MUJOCO_GL", "egl")
        env.setdefault("PYOPENGL_PLATFORM", env["MUJOCO_GL"])
        self.proc = subprocess.Popen([str(py), str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, close_fds=True)
        self._recv()  # the "ready" frame

    def log_tail(self, n: int = 2000) -> str:
        try:
            return Path(self.log.name).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _recv(self):
        try:
            header, arrays = read_frame(self.proc.stdout)
        except EOFError:
            code = self.proc.poll()
            raise LiberoWorkerError(f"the LIBERO worker exited (code {code}); its log {self.log.name} ends:\n"
                                    f"{self.log_tail()}") from None
        return header, arrays

    def call(self, op: str, arrays: dict[str, np.ndarray] | None = None, **fields):
        if self.proc.poll() is not None:
            raise LiberoWorkerError(f"the LIBERO worker is not running (exit code {self.proc.returncode}); "
                                    f"log {self.log.name}")
        try:
            write_frame(self.proc.stdin, {"op": op, **fields}, arrays)
        except BrokenPipeError:
            self.proc.wait(timeout=5)
            return self._recv()
        header, out = self._recv()
        if not header.pop("ok", False):
            if header.get("kind") == "not_applicable":
                raise NotApplicableError(header.get("error", "this LIBERO scene cannot take the perturbation"))
            if header.get("kind") == "config":
                raise ConfigError(header.get("error", "LIBERO refused the request"))
            raise LiberoWorkerError(f"LIBERO {op}: {header.get('error')}; worker log {self.log.name}")
        return header, out

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("close")
                self.proc.stdin.close()
                self.proc.wait(timeout=20)
            except (LiberoWorkerError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
