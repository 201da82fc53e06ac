"""The UR controller emulator seen through the unmodified ur_rtde client: achieved RTDE rate and moveL round trip.

* RTDE rate: data packages per second on the wire, counted by a minimal RTDE subscriber written here
  from the protocol (version 2, a 500 Hz ``timestamp`` recipe, start), while ur_rtde's receive and
  control interfaces are connected too; target 500 Hz, reported as a ratio to it. Also the distinct
  ``timestamp`` values an ``RTDEReceiveInterface`` shows when polled from Python (polling under load
  misses some), and the emulator's own control-loop rate (printed when it stops).
* moveL round trip: wall time of ``moveL`` to the current pose (no motion: the register handshake,
  command -> controller cycle -> done -> client clear, over loopback) and of a 10 mm move, whose
  trapezoid at 0.25 m/s and 1.2 m/s^2 takes 0.0898 s, so its overhead is the difference. The
  in-process baseline is one control period (2 ms at 500 Hz): the handshake cannot be shorter.
"""
from __future__ import annotations

import re
import socket
import statistics
import struct
import time


def _raw_rate(host: str, seconds: float) -> tuple[float, float]:
    """(packages per wall second, packages per controller second) for a 500 Hz ``timestamp`` subscription."""

    def send(sock, kind: str, payload: bytes = b"") -> None:
        sock.sendall(struct.pack(">HB", 3 + len(payload), ord(kind)) + payload)

    def recv(sock) -> tuple[str, bytes]:
        head = b""
        while len(head) < 3:
            head += sock.recv(3 - len(head))
        size, kind = struct.unpack(">HB", head)
        body = b""
        while len(body) < size - 3:
            body += sock.recv(size - 3 - len(body))
        return chr(kind), body

    with socket.create_connection((host, 30004), timeout=5) as sock:
        send(sock, "V", struct.pack(">H", 2))
        assert recv(sock) == ("V", b"\x01")
        send(sock, "O", struct.pack(">d", 500.0) + b"timestamp")
        kind, body = recv(sock)
        assert kind == "O" and body[1:] == b"DOUBLE", body
        send(sock, "S")
        assert recv(sock) == ("S", b"\x01")
        n, first, last = 0, None, None
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            kind, body = recv(sock)
            if kind == "U":
                (ts,) = struct.unpack(">d", body[1:9])
                first = ts if first is None else first
                last, n = ts, n + 1
        wall = time.perf_counter() - t0
        send(sock, "P")
    return n / wall, (n - 1) / max(last - first, 1e-9)


def run(quick: bool = False) -> list[dict]:
    import rtde_control
    import rtde_receive

    from embeval.robot.ur_emulator import EmulatorProcess
    from embeval.robot.ur_emulator.motion import Trapezoid

    seconds = 1.0 if quick else 3.0
    n_moves = 5 if quick else 20
    rows: list[dict] = []
    with EmulatorProcess("--quiet") as emu:
        r = rtde_receive.RTDEReceiveInterface(emu.host)
        c = rtde_control.RTDEControlInterface(emu.host)
        try:
            wire, per_ctrl = _raw_rate(emu.host, seconds)
            rows.append({"measure": "RTDE data packages on the wire", "value": round(wire, 1), "unit": "Hz",
                         "target": 500, "vs_target": round(wire / 500, 3),
                         "note": f"{per_ctrl:.0f} per controller second (raw subscriber, 500 Hz recipe)"})
            # RTDE rate seen by the client
            seen, last = 0, r.getTimestamp()
            first = last
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                ts = r.getTimestamp()
                if ts != last:
                    seen += 1
                    last = ts
                time.sleep(0.0002)
            wall = time.perf_counter() - t0
            client_rate = seen / wall
            stamp_rate = seen / max(last - first, 1e-9)  # packages per second of controller time
            rows.append({"measure": "RTDE packages seen by rtde_receive", "value": round(client_rate, 1), "unit": "Hz",
                         "target": 500, "vs_target": round(client_rate / 500, 3),
                         "note": f"{stamp_rate:.0f} per controller second; Python polling misses some under load"})
            # moveL round trips
            pose = r.getActualTCPPose()
            zero = []
            for _ in range(n_moves):
                t = time.perf_counter()
                assert c.moveL(pose, 0.25, 1.2)
                zero.append(time.perf_counter() - t)
            ideal = Trapezoid(0.01, 0.25, 1.2).duration
            ten = []
            for k in range(n_moves):
                p = list(pose)
                p[2] += 0.01 if k % 2 == 0 else 0.0
                t = time.perf_counter()
                assert c.moveL(p, 0.25, 1.2)
                ten.append(time.perf_counter() - t - ideal)
            med0 = statistics.median(zero) * 1e3
            rows.append({"measure": "moveL round trip, no motion (median)", "value": round(med0, 2), "unit": "ms",
                         "target": 2.0, "vs_target": round(med0 / 2.0, 2),
                         "note": f"baseline: one 2 ms control period; max {max(zero) * 1e3:.1f} ms"})
            med10 = statistics.median(ten) * 1e3
            rows.append({"measure": "moveL 10 mm, time beyond its 89.8 ms profile (median)", "value": round(med10, 2),
                         "unit": "ms", "target": 2.0, "vs_target": round(med10 / 2.0, 2),
                         "note": "every other move returns to the start (same profile)"})
        finally:
            c.stopScript()
            c.disconnect()
            r.disconnect()
    m = re.search(r"\(([\d.]+) Hz\)", emu.log())
    if m:
        loop = float(m.group(1))
        rows.insert(2, {"measure": "emulator control loop", "value": loop, "unit": "Hz", "target": 500,
                        "vs_target": round(loop / 500, 3), "note": "cycles per second over the whole run"})
    return rows
