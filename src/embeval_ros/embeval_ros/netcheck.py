"""Check that DDS (RTPS) traffic stays on loopback: a raw-socket sniffer (Linux, root).

:class:`RtpsSniffer` captures every frame on every interface (``AF_PACKET``) while it runs and
counts UDP datagrams that are RTPS (payload starts with ``b"RTPS"``) or go to a DDS port
(7400-7999, the RTPS well-known range of domains 0..) per interface. Use it to prove that
the shipped localhost profile keeps discovery and data off the robot network.
"""
from __future__ import annotations

import os
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field

ETH_P_ALL = 0x0003
DDS_PORTS = range(7400, 8000)


@dataclass
class SniffResult:
    """Per-interface counts of RTPS/DDS-port UDP datagrams, and frames seen in total."""

    rtps: Counter = field(default_factory=Counter)
    frames: Counter = field(default_factory=Counter)
    samples: list = field(default_factory=list)  # (ifname, src, dst, dport) of non-loopback hits

    def outside_loopback(self) -> int:
        return sum(n for ifname, n in self.rtps.items() if ifname != "lo")


def can_sniff() -> tuple[bool, str]:
    """Whether a raw AF_PACKET socket can be opened here, and why not."""
    if not hasattr(socket, "AF_PACKET"):
        return False, "AF_PACKET raw sockets exist on Linux only"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return False, "sniffing needs root (or CAP_NET_RAW): run as root to check that DDS stays on loopback"
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)).close()
    except OSError as exc:
        return False, f"cannot open a raw socket: {exc}"
    return True, ""


def classify(frame: bytes) -> tuple[str, str, int, bool] | None:
    """``(src, dst, dst_port, is_rtps)`` for an Ethernet frame carrying UDP over IPv4/IPv6, else None."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack("!H", frame[12:14])[0]
    if ethertype == 0x0800 and len(frame) >= 34:
        ihl = (frame[14] & 0x0F) * 4
        if frame[23] != 17:
            return None
        src, dst = socket.inet_ntoa(frame[26:30]), socket.inet_ntoa(frame[30:34])
        udp = 14 + ihl
    elif ethertype == 0x86DD and len(frame) >= 54:
        if frame[20] != 17:
            return None
        src = socket.inet_ntop(socket.AF_INET6, frame[22:38])
        dst = socket.inet_ntop(socket.AF_INET6, frame[38:54])
        udp = 54
    else:
        return None
    if len(frame) < udp + 8:
        return None
    dport = struct.unpack("!H", frame[udp + 2: udp + 4])[0]
    payload = frame[udp + 8: udp + 12]
    return src, dst, dport, payload == b"RTPS"


class RtpsSniffer:
    """Context manager: sniff all interfaces in a background thread until exit."""

    def __init__(self):
        self.result = SniffResult()
        self._stop = threading.Event()
        self._sock = None
        self._thread = None

    def __enter__(self) -> RtpsSniffer:
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                frame, addr = self._sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                break
            ifname = addr[0]
            self.result.frames[ifname] += 1
            hit = classify(frame)
            if hit and (hit[3] or hit[2] in DDS_PORTS):
                self.result.rtps[ifname] += 1
                if ifname != "lo" and len(self.result.samples) < 20:
                    self.result.samples.append((ifname, hit[0], hit[1], hit[2]))

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()
