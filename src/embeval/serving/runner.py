"""Run a FastAPI app with uvicorn: in a background thread (tests, notebooks) or in the foreground (CLI).

Servers bind 127.0.0.1 unless the caller asks for another host explicitly.
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

from embeval.errors import ServerUnavailableError

LOCALHOST = "127.0.0.1"


@dataclass
class RunningServer:
    """A server running in a daemon thread; ``url`` is ``http://host:port``. Stop with :meth:`stop`."""

    url: str
    server: object
    thread: threading.Thread

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit TCP_NODELAY on Linux: without it, keep-alive requests wait ~40 ms
    # (Nagle + delayed ACK) for every reply
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServerUnavailableError(f"cannot listen on {host}:{port} ({exc}); choose another --port") from None
    return sock


def serve_in_thread(app, host: str = LOCALHOST, port: int = 0, startup_timeout: float = 20.0) -> RunningServer:
    """Start ``app`` in a daemon thread; ``port=0`` picks a free port. Returns once it accepts requests."""
    import uvicorn

    sock = _bind(host, port)
    actual = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"uvicorn-{actual}")
    thread.start()
    t0 = time.monotonic()
    while not server.started:
        if not thread.is_alive() or time.monotonic() - t0 > startup_timeout:
            server.should_exit = True
            raise ServerUnavailableError(f"server on {host}:{actual} did not start within {startup_timeout} s")
        time.sleep(0.02)
    return RunningServer(url=f"http://{host}:{actual}", server=server, thread=thread)


def serve_forever(app, host: str = LOCALHOST, port: int = 8000) -> None:
    """Serve ``app`` in the foreground until interrupted."""
    import uvicorn

    sock = _bind(host, port)
    uvicorn.Server(uvicorn.Config(app, log_level="info", lifespan="off")).run(sockets=[sock])
