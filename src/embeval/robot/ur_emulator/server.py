"""The emulator's network side: RTDE (30004), dashboard (29999), script (30003) servers and the control loop.

Every connection has its own reader thread; RTDE data packages are produced by the one control-loop
thread at ``rate_hz`` (500 Hz) and handed to a per-connection writer thread, which drops packages a
slow client cannot take (as the controller does) instead of stalling the loop. Inputs are bounded:
RTDE messages by their 16-bit size, dashboard lines to 4 KiB, scripts to 1 MiB.
"""
from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from collections import deque

from embeval.errors import ServerUnavailableError
from embeval.robot.ur_emulator import dashboard, rtde
from embeval.robot.ur_emulator.controller import Controller, EmulatorConfig

log = logging.getLogger("embeval.ur_emulator")

RTDE_PORT, DASHBOARD_PORT, SCRIPT_PORT = 30004, 29999, 30003
MAX_DASHBOARD_LINE = 4096
MAX_SCRIPT = 1 << 20
MAX_PENDING_PACKAGES = 64


def _recv_exact(sock: socket.socket, n: int, stop: threading.Event) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except TimeoutError:
            if stop.is_set():
                return None
            continue
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class _Listener:
    """A TCP server socket whose accepted connections are handed to ``handler(sock, addr)`` in a thread."""

    def __init__(self, host: str, port: int, handler, name: str, stop: threading.Event):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as exc:
            self.sock.close()
            raise ServerUnavailableError(
                f"cannot listen on {host}:{port} for the {name} ({exc.strerror}); another emulator or controller "
                "holds it: stop it, or use another loopback host (--host 127.0.0.2)") from None
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.handler, self.name, self.stop = handler, name, stop
        self.thread = threading.Thread(target=self._run, name=f"ur-emulator-{name}", daemon=True)
        self.conns: set[socket.socket] = set()

    def _run(self):
        while not self.stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(0.2)
            self.conns.add(conn)
            threading.Thread(target=self._serve, args=(conn, addr), name=f"ur-emulator-{self.name}-conn",
                             daemon=True).start()

    def _serve(self, conn, addr):
        try:
            self.handler(conn, addr)
        except Exception:
            log.exception("ur-emulator: %s connection from %s failed", self.name, addr)
        finally:
            self.conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def close(self):
        with contextlib.suppress(OSError):
            self.sock.close()
        for c in list(self.conns):
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
                c.close()


class RTDEConnection:
    """One RTDE client: its recipes, its start/pause state, its outbound queue and writer thread."""

    def __init__(self, server: URControllerEmulator, sock: socket.socket):
        self.server, self.sock = server, sock
        self.version = 0
        self.output: rtde.Recipe | None = None
        self.divider = 1
        self.inputs: dict[int, rtde.Recipe] = {}
        self.claimed: set[str] = set()
        self.started = False
        self.closed = threading.Event()
        self._q: deque[tuple[bool, bytes]] = deque()
        self._cv = threading.Condition()
        self.sent = 0
        self.writer = threading.Thread(target=self._write_loop, name="ur-emulator-rtde-writer", daemon=True)
        self.writer.start()

    # outbound
    def send(self, msg_type: int, payload: bytes = b"", droppable: bool = False) -> None:
        with self._cv:
            if droppable:
                n = sum(1 for d, _ in self._q if d)
                if n >= MAX_PENDING_PACKAGES:
                    return  # the client is not keeping up: skip this package
            self._q.append((droppable, rtde.frame(msg_type, payload)))
            self._cv.notify()

    def _write_loop(self):
        while not self.closed.is_set():
            with self._cv:
                while not self._q and not self.closed.is_set():
                    self._cv.wait(0.2)
                if self.closed.is_set():
                    return
                _, data = self._q.popleft()
            try:
                self.sock.sendall(data)
                self.sent += 1
            except OSError:
                self.closed.set()
                return

    def publish(self, snap: dict, tick: int) -> None:
        if self.started and self.output is not None and tick % self.divider == 0:
            self.send(rtde.DATA_PACKAGE, self.output.pack(snap), droppable=True)

    # inbound
    def serve(self) -> None:
        stop = self.server._stop
        try:
            while not stop.is_set() and not self.closed.is_set():
                head = _recv_exact(self.sock, rtde.HEADER.size, stop)
                if head is None:
                    return
                size, msg_type = rtde.HEADER.unpack(head)
                if size < rtde.HEADER.size:
                    raise rtde.ProtocolError(f"RTDE header announces {size} bytes, less than the header itself")
                body = _recv_exact(self.sock, size - rtde.HEADER.size, stop)
                if body is None:
                    return
                self.handle(msg_type, body)
        except rtde.ProtocolError as exc:
            self.server.controller.refuse(f"RTDE client error, connection closed: {exc}")
        finally:
            self.closed.set()
            with self._cv:
                self._cv.notify_all()
            self.server._release(self)

    def handle(self, msg_type: int, body: bytes) -> None:
        srv = self.server
        if msg_type == rtde.REQUEST_PROTOCOL_VERSION:
            if len(body) != 2:
                raise rtde.ProtocolError("protocol version request needs a uint16")
            (v,) = struct.unpack(">H", body)
            ok = v == 2
            self.version = v if ok else self.version
            self.send(rtde.REQUEST_PROTOCOL_VERSION, bytes([int(ok)]))
        elif msg_type == rtde.GET_URCONTROL_VERSION:
            self.send(rtde.GET_URCONTROL_VERSION, struct.pack(">IIII", *srv.config.version))
        elif msg_type == rtde.TEXT_MESSAGE:
            pass
        elif msg_type == rtde.SETUP_OUTPUTS:
            if len(body) < 8:
                raise rtde.ProtocolError("output setup needs a frequency (double) and variable names")
            (freq,) = struct.unpack(">d", body[:8])
            names = rtde.parse_names(body[8:])
            types = [rtde.OUTPUT_TYPES.get(n, "NOT_FOUND") for n in names]
            if "NOT_FOUND" in types or not names or not 0 < freq <= srv.config.rate_hz:
                if not 0 < freq <= srv.config.rate_hz:
                    srv.controller.refuse(f"RTDE output frequency {freq} Hz not in (0, {srv.config.rate_hz:g}]")
                self.send(rtde.SETUP_OUTPUTS, bytes([0]) + ",".join(types).encode())
                return
            self.output = rtde.Recipe(1, tuple(names), tuple(types))
            self.divider = max(1, round(srv.config.rate_hz / freq))
            self.send(rtde.SETUP_OUTPUTS, bytes([1]) + ",".join(types).encode())
        elif msg_type == rtde.SETUP_INPUTS:
            names = rtde.parse_names(body)
            types = [rtde.INPUT_TYPES.get(n, "NOT_FOUND") for n in names]
            with srv.claims_lock:
                busy = {n for n in names if srv.claims.get(n, self) is not self}
                types = ["IN_USE" if n in busy else t for n, t in zip(names, types)]
                if busy or "NOT_FOUND" in types or not names:
                    self.send(rtde.SETUP_INPUTS, bytes([0]) + ",".join(types).encode())
                    return
                rid = len(self.inputs) + 1
                if rid > 255:
                    raise rtde.ProtocolError("more than 255 input recipes on one connection")
                for n in names:
                    srv.claims[n] = self
                    self.claimed.add(n)
            self.inputs[rid] = rtde.Recipe(rid, tuple(names), tuple(types))
            self.send(rtde.SETUP_INPUTS, bytes([rid]) + ",".join(types).encode())
        elif msg_type == rtde.START:
            self.started = True
            self.send(rtde.START, bytes([1]))
        elif msg_type == rtde.PAUSE:
            self.started = False
            self.send(rtde.PAUSE, bytes([1]))
        elif msg_type == rtde.DATA_PACKAGE:
            if not body:
                raise rtde.ProtocolError("empty data package")
            recipe = self.inputs.get(body[0])
            if recipe is None:
                raise rtde.ProtocolError(f"data package for input recipe {body[0]}, which was never set up "
                                         f"(set up: {sorted(self.inputs)})")
            srv.controller.inputs_received(recipe.unpack(body[1:]))
        else:
            raise rtde.ProtocolError(f"unknown RTDE message type {msg_type} ({chr(msg_type)!r})")


class URControllerEmulator:
    """A UR e-Series controller for the ur_rtde client on ``host`` (loopback by default).

    ``start()`` binds the ports and runs the control loop; ``stop()`` closes everything. Use as a
    context manager. The state lives in :attr:`controller` (:class:`Controller`).
    """

    def __init__(self, host: str = "127.0.0.1", config: EmulatorConfig | None = None, *,
                 rtde_port: int = RTDE_PORT, dashboard_port: int = DASHBOARD_PORT, script_port: int = SCRIPT_PORT):
        self.host, self.config = host, config or EmulatorConfig()
        self.controller = Controller(self.config)
        self.ports = {"rtde": rtde_port, "dashboard": dashboard_port, "script": script_port}
        self._stop = threading.Event()
        self._listeners: list[_Listener] = []
        self.rtde_conns: list[RTDEConnection] = []
        self.claims: dict[str, RTDEConnection] = {}
        self.claims_lock = threading.Lock()
        self._loop: threading.Thread | None = None
        self.ticks = 0
        self.loop_started = 0.0

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> URControllerEmulator:
        try:
            for name, port, handler in (("RTDE interface", self.ports["rtde"], self._serve_rtde),
                                        ("dashboard server", self.ports["dashboard"], self._serve_dashboard),
                                        ("script interface", self.ports["script"], self._serve_script)):
                lst = _Listener(self.host, port, handler, name, self._stop)
                self._listeners.append(lst)
        except ServerUnavailableError:
            self.stop()
            raise
        for lst in self._listeners:
            lst.thread.start()
        self._loop = threading.Thread(target=self._control_loop, name="ur-emulator-control", daemon=True)
        self._loop.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for lst in self._listeners:
            lst.close()
        for c in list(self.rtde_conns):
            c.closed.set()
        if self._loop is not None:
            self._loop.join(timeout=2)
        self._listeners.clear()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- control loop -------------------------------------------------------------------------
    def _control_loop(self) -> None:
        period = 1.0 / self.config.rate_hz
        nxt = time.monotonic()
        self.loop_started = nxt
        while not self._stop.is_set():
            self.controller.tick(period)
            conns = [c for c in self.rtde_conns if c.started and c.output is not None]
            if conns:
                snap = self.controller.snapshot()
                for c in conns:
                    try:
                        c.publish(snap, self.ticks)
                    except Exception:
                        log.exception("ur-emulator: publishing to an RTDE client failed")
                        c.closed.set()
            self.ticks += 1
            nxt += period
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -0.1:  # far behind (machine busy): resynchronise instead of bursting
                nxt = time.monotonic()

    @property
    def achieved_rate(self) -> float:
        """Control ticks per second since start (the rate of RTDE packages at the full 500 Hz recipe)."""
        dt = time.monotonic() - self.loop_started
        return self.ticks / dt if dt > 0 else 0.0

    # -- RTDE -----------------------------------------------------------------------------------
    def _serve_rtde(self, sock, addr) -> None:
        conn = RTDEConnection(self, sock)
        self.rtde_conns.append(conn)
        conn.serve()

    def _release(self, conn: RTDEConnection) -> None:
        with self.claims_lock:
            for n in conn.claimed:
                if self.claims.get(n) is conn:
                    del self.claims[n]
        with contextlib.suppress(ValueError):
            self.rtde_conns.remove(conn)

    # -- script port --------------------------------------------------------------------------
    def _serve_script(self, sock, addr) -> None:
        buf = b""
        last = time.monotonic()
        while not self._stop.is_set():
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if buf and time.monotonic() - last > 0.5:  # an incomplete script or bare URScript lines
                    self.controller.load_script(buf.decode("utf-8", "replace"))
                    buf = b""
                continue
            except OSError:
                return
            if not chunk:
                if buf.strip():
                    self.controller.load_script(buf.decode("utf-8", "replace"))
                return
            buf += chunk
            last = time.monotonic()
            if len(buf) > MAX_SCRIPT:
                self.controller.refuse(f"script larger than {MAX_SCRIPT} bytes refused")
                return
            while True:
                text = buf.decode("utf-8", "replace")
                end = _script_end(text)
                if end < 0:
                    break
                self.controller.load_script(text[:end])
                buf = text[end:].encode()

    # -- dashboard ------------------------------------------------------------------------------
    def _serve_dashboard(self, sock, addr) -> None:
        sock.sendall(b"Connected: Universal Robots Dashboard Server\n")
        buf = b""
        while not self._stop.is_set():
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                reply, close = self.dashboard(line.decode("utf-8", "replace").strip())
                sock.sendall((reply + "\n").encode())
                if close:
                    return
            if len(buf) > MAX_DASHBOARD_LINE:
                sock.sendall(b"could not understand: line too long (over 4096 bytes)\n")
                return

    def dashboard(self, line: str) -> tuple[str, bool]:
        """Reply to one dashboard command (without the newline) and whether to close the connection."""
        return dashboard.reply(self.controller, self.config, line)


def _script_end(text: str) -> int:
    """End offset of the first complete ``def ...: ... end`` program in ``text`` (-1 when none is complete)."""
    lines = text.splitlines(keepends=True)
    pos, inside = 0, False
    for ln in lines:
        s = ln.rstrip("\r\n")
        if not inside and s.startswith(("def ", "sec ")):
            inside = True
        elif inside and s == "end" and ln.endswith("\n"):
            return pos + len(ln)
        elif not inside and s.strip() and ln.endswith("\n"):
            return pos + len(ln)  # a bare URScript line
        pos += len(ln)
    return -1
