"""Run a FastAPI app with uvicorn: in a background thread (tests, notebooks) or in the foreground (CLI).

Servers bind 127.0.0.1 unless the caller asks for another host explicitly.
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from embeval import checks
from embeval.errors import ConfigError, ServerUnavailableError

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
        queue = getattr(getattr(self.server.config.app, "state", None), "queue", None)
        if queue is not None:  # the model worker of embeval's servers: drop calls that never started
            queue.shutdown()

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (IPv4). :class:`ConfigError` for a port outside 0..65535 or a
    host that is not an IPv4 address or name of this machine, :class:`ServerUnavailableError` for a port
    that is taken or not allowed; each names the flag to change."""
    import errno

    checks.integer(port, "--port", 0, checks.MAX_PORT, why="a TCP port; 0: any free one")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit TCP_NODELAY on Linux: without it, keep-alive requests wait ~40 ms
    # (Nagle + delayed ACK) for every reply
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    default = f"e.g. --host {LOCALHOST} (the default)"
    try:
        sock.bind((host, port))
    except (socket.gaierror, UnicodeError, ValueError, TypeError) as exc:  # unresolvable, bad IDNA, NUL byte
        sock.close()
        why = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(f"--host {host!r} is not an IPv4 address or host name that resolves here ({why}); "
                          f"give an address of this machine, {default}") from None
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"--host {host} is not an address of this machine ({exc.strerror}); give one of its "
                              f"addresses, {default}") from None
        if exc.errno == errno.EADDRINUSE:
            raise ServerUnavailableError(f"port {port} on {host} is already in use; choose another --port "
                                         "(or stop the server holding it)") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise ServerUnavailableError(f"not allowed to listen on {host}:{port} ({exc.strerror}); ports below 1024 "
                                         "need privileges: choose another --port of 1024 or more") from None
        raise ServerUnavailableError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); check --host and "
                                     "--port") from None
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


def serve_forever(app, host: str = LOCALHOST, port: int = 8000, announce: Callable[[int], None] | None = None) -> None:
    """Serve ``app`` in the foreground until interrupted. ``announce(port)`` runs once the socket is bound
    (so nothing says "serving" for an address that cannot be listened on)."""
    import uvicorn

    sock = _bind(host, port)
    if announce is not None:
        announce(sock.getsockname()[1])
    uvicorn.Server(uvicorn.Config(app, log_level="info", lifespan="off")).run(sockets=[sock])



def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def start_serve_process(args: list[str], port: int | None = None, env: Mapping[str, str] | None = None,
                        wait: bool = True, timeout: float = 60.0):
    """``python -m embeval.serving ARGS --port PORT`` (the arguments of ``embeval serve``) as its own process on 127.0.0.1 (a free port when ``port`` is None);
    returns ``(proc, url)``, once ``/health`` answers 200 when ``wait``. Its stdout and stderr go to a temporary
    file (``proc.log``, never a pipe that a chatty server could fill and block on). See :func:`wait_healthy`."""
    import os
    import subprocess
    import sys
    import tempfile

    port = free_local_port() if port is None else port
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "embeval.serving", *args, "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=dict(os.environ if env is None else env))
    proc.log = log
    url = f"http://{LOCALHOST}:{port}"
    if wait:
        wait_healthy(proc, url, timeout)
    return proc, url


def wait_healthy(proc, url: str, timeout: float = 60.0) -> None:
    """Return once ``url``/health answers 200; kill ``proc`` and raise :class:`ServerUnavailableError` with the
    end of its output when it exits first or ``timeout`` s pass."""
    import httpx

    t_end = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > t_end:
            proc.kill()
            proc.wait()
            proc.log.seek(0)
            tail = proc.log.read().decode(errors="replace")[-2000:]
            raise ServerUnavailableError(f"embeval serve did not start at {url} within {timeout:g} s: {tail}")
        time.sleep(0.1)


#: keys of a subject spec's ``serve`` mapping, per protocol
SERVE_KEYS = {"openvla": ("camera", "cameras", "state", "gripper", "convention", "limits", "max_batch_size", "max_wait_ms",
                         "max_episodes"), "openai": ("model_name", "limits"),
              "vla-eval": ("vla_eval", "gripper", "convention", "limits", "max_batch_size", "max_wait_ms",
                           "max_connections"),
              "openpi": ("openpi", "limits", "max_batch_size", "max_wait_ms", "max_connections")}
#: keys of ``serve`` that configure another policy protocol: accepted in the spec, left out when serving this one
OTHER_KEYS = {"openvla": ("vla_eval", "openpi", "max_connections"),
              "vla-eval": ("camera", "cameras", "state", "max_episodes", "openpi"),
              "openpi": ("camera", "cameras", "state", "max_episodes", "vla_eval", "gripper", "convention")}
#: protocol -> "module:attribute" of the factory ``(subject, limits=..., **serve options)``
FACTORIES = {"openvla": "embeval.serving.openvla_server:create_app", "openai": "embeval.serving.openai_server:create_app",
             "vla-eval": "embeval.serving.vla_eval_server:create_server",
             "openpi": "embeval.serving.openpi_server:create_server"}


def app_from_spec(spec, protocol: str, subject: Any = None, **overrides: Any):
    """The app serving the subject ``spec`` describes under ``protocol`` ("openvla" | "openai" | "vla-eval" |
    "openpi": the last two a :class:`~embeval.serving.vla_eval_server.VlaEvalServer`, not an ASGI app), set up
    from the spec's ``serve`` mapping (policies: ``convention``, the :mod:`embeval.conventions` action convention of
    the replies, and ``gripper`` overriding its gripper); ``overrides`` (``None`` values ignored) win over it (for openvla also
    ``max_batch_size`` and ``max_wait_ms``: batching, see :func:`embeval.serving.openvla_server.create_app`). The limit
    overrides are ``max_body_mb``, ``queue_size``, ``max_images`` and ``max_request_mpixels``. ``subject``: an
    already loaded subject."""
    from embeval.serving.limits import (
        MAX_BODY_MB,
        ServerLimits,
        mib_to_bytes,
        mpixels_to_pixels,
    )
    from embeval.subjects.registry import load_subject, read_spec

    spec = read_spec(spec)
    if protocol not in SERVE_KEYS:
        raise ConfigError(f"unknown protocol {protocol!r}; choose {', '.join(SERVE_KEYS)}")
    if protocol in OTHER_KEYS and spec.kind != "policy":
        raise ConfigError(f"subject {spec.id!r}: `serve {protocol}` needs a policy subject, this spec has kind {spec.kind!r}")
    if protocol == "openai" and spec.kind == "policy":
        raise ConfigError(f"subject {spec.id!r}: `serve openai` needs an llm or vlm subject, this spec has kind 'policy'")
    opts: dict[str, Any] = {k: v for k, v in spec.serve.items() if k not in OTHER_KEYS.get(protocol, ())}
    unknown = sorted(set(opts) - set(SERVE_KEYS[protocol]))
    if unknown:
        raise ConfigError(f"subject {spec.id!r}: field 'serve' has {', '.join(map(repr, unknown))}, unknown for "
                          f"`serve {protocol}`; known: {', '.join(SERVE_KEYS[protocol])}")
    if opts.get("limits") is not None and not isinstance(opts["limits"], Mapping):
        raise ConfigError(f"subject {spec.id!r}: field 'serve.limits' must be a mapping, e.g. {{max_body_mb: 32}}")
    limits = ServerLimits.from_mapping(opts.pop("limits", None))
    limit_over = {k: overrides.pop(k, None) for k in ("max_body_mb", "queue_size", "max_images", "max_request_mpixels")}
    if limit_over["max_body_mb"] is not None:  # the bodies held at once must fit at least one body
        body = mib_to_bytes(limit_over["max_body_mb"], "--max-body-mb", upper_mib=MAX_BODY_MB)
        limits = replace(limits, max_body_bytes=body, max_inflight_bytes=max(body, limits.max_inflight_bytes))
    if limit_over["queue_size"] is not None:
        limits = replace(limits, queue_size=checks.integer(limit_over["queue_size"], "--queue-size", 1))
    if limit_over["max_images"] is not None:
        limits = replace(limits, max_images=checks.integer(limit_over["max_images"], "--max-images", 1))
    if limit_over["max_request_mpixels"] is not None:  # one image may not pass it; all requests hold at least one
        px = mpixels_to_pixels(limit_over["max_request_mpixels"], "--max-request-mpixels")
        limits = replace(limits, max_request_pixels=px, max_image_pixels=min(limits.max_image_pixels, px),
                         max_inflight_pixels=max(limits.max_inflight_pixels, px))
    opts.update({k: v for k, v in overrides.items() if v is not None})
    subject = subject if subject is not None else load_subject(spec)
    import importlib

    module, attr = FACTORIES[protocol].split(":")
    return getattr(importlib.import_module(module), attr)(subject, limits=limits, **opts)
