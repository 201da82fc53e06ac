"""One writer per shard of a run folder.

``RUN/locks/shard-<I>-of-<N>.lock`` is held with ``flock(2)`` for as long as a process runs that
shard; it holds the holder as JSON (pid, host, start time, command). The kernel releases an flock
when its process ends, however it ends (SIGKILL, OOM, a crash), so a lock left by a dead process
is free by construction: the next process takes it and writes itself in. Two processes whose
shards share units are refused, the second with a message naming the first:

- the same shard (``--shard-index I --num-shards N`` twice, or two plain runs: shard 0 of 1);
- shards of different ``--num-shards`` that overlap: shard ``I`` of ``N`` and ``J`` of ``M``
  share groups exactly when ``I = J (mod gcd(N, M))`` (groups are dealt round-robin, see
  :func:`embeval.runs.units.assign_shards`); shard 0 of 1 overlaps every shard.

Disjoint shards of one folder still run side by side (the documented way to use several local
processes). Where the file system has no flock (some network file systems), the holder's pid is
checked instead: a holder on this host whose process no longer exists (or whose pid was reused by
a later process) is stale and taken over; a holder on another host is respected.
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

from embeval.errors import EmbevalError

LOCK_DIR = "locks"
_NAME = re.compile(r"^shard-(\d+)-of-(\d+)\.lock$")
#: flock is not available here: fall back to checking the holder's pid
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class RunLockedError(EmbevalError):
    """Another live process runs (a shard overlapping) this shard of the run folder."""

    def __init__(self, message: str, holder: dict[str, Any]):
        super().__init__(message)
        self.holder = holder


def shards_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Do shard ``a = (index, num_shards)`` and shard ``b`` share any group (for enough groups)?"""
    return (a[0] - b[0]) % math.gcd(a[1], b[1]) == 0


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19])  # field 22, after "pid (comm) "
    except (OSError, ValueError, IndexError):
        return None


def holder_alive(holder: dict[str, Any]) -> bool:
    """Is the process ``holder`` describes still running? A holder on another host counts as alive."""
    if holder.get("host") != socket.gethostname():
        return True
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    start = holder.get("proc_start")
    return start is None or process_start(pid) in (None, start)  # a different start time: the pid was reused


def describe(holder: dict[str, Any]) -> str:
    """``pid 123 on host since 2026-11-23 09:13:07 UTC (embeval run ...)``."""
    if not holder:
        return "another process (it has not written its name yet)"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["started"])) if holder.get("started") else "?"
    cmd = f" ({holder['command']})" if holder.get("command") else ""
    return f"pid {holder.get('pid')} on {holder.get('host')} since {since}{cmd}"


def _command() -> str:
    """This process's command line, short: ``embeval run spec.yaml --out runs/x`` (also for ``python -m embeval_cli``)."""
    if not sys.argv:
        return ""
    prog = Path(sys.argv[0]).name
    if prog == "__main__.py":
        prog = "embeval" if Path(sys.argv[0]).parent.name == "embeval_cli" else f"python -m {Path(sys.argv[0]).parent.name}"
    elif prog == "-c":
        prog = "python -c"
    text = " ".join([prog, *sys.argv[1:]])
    return text if len(text) <= 160 else text[:157] + "..."


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 65536)
        holder = json.loads(data.decode()) if data.strip() else {}
        return holder if isinstance(holder, dict) else {}
    except (OSError, ValueError):
        return {}


def live_holders(run_dir: str | os.PathLike, flock: bool = True) -> list[tuple[tuple[int, int], dict[str, Any]]]:
    """((shard index, num_shards), holder) of every shard of ``run_dir`` a live process holds now (probed without
    waiting: a lock file whose flock can be taken is free, whatever it says; ``flock=False``: its pid is checked)."""
    import fcntl

    d = Path(run_dir) / LOCK_DIR
    out = []
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        m = _NAME.match(p.name)
        if not m:
            continue
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            if flock:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    continue  # free: its holder has ended (a stale file, left in place; see the module docstring)
                except BlockingIOError:
                    holder = _read_holder(fd)
                except OSError as exc:
                    if exc.errno not in _NO_FLOCK:
                        raise
                    holder = _read_holder(fd)
                    if not (holder and holder_alive(holder)):
                        continue
            else:
                holder = _read_holder(fd)
                if not (holder and holder_alive(holder)):
                    continue
            out.append(((int(m.group(1)), int(m.group(2))), holder))
        finally:
            os.close(fd)  # also drops the shared probe lock
    return out


class RunLock:
    """Hold shard ``shard_index`` of ``num_shards`` of the run folder ``run_dir`` (a context manager).

    :meth:`acquire` raises :class:`RunLockedError` naming the holder when a live process holds an
    overlapping shard; nothing waits."""

    def __init__(self, run_dir: str | os.PathLike, shard_index: int = 0, num_shards: int = 1):
        self.dir = Path(run_dir) / LOCK_DIR
        self.shard = (int(shard_index), int(num_shards))
        self.path = self.dir / f"shard-{self.shard[0]}-of-{self.shard[1]}.lock"
        self._fd: int | None = None
        self._flock = True

    # ------------------------------------------------------------------ acquire / release
    def acquire(self) -> "RunLock":
        import fcntl

        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._refuse(_read_holder(fd), self.shard)
            except OSError as exc:
                if exc.errno not in _NO_FLOCK:
                    raise
                self._flock = False
                holder = _read_holder(fd)
                if holder and holder_alive(holder) and holder.get("pid") != os.getpid():
                    self._refuse(holder, self.shard)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        try:
            self._write_holder()
            conflicts = list(self._live_overlapping())
            if conflicts:
                self._refuse(conflicts[0][1], conflicts[0][0])
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if not self._flock:  # the pid is the lock: clear it so nobody has to decide it is stale
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    # ------------------------------------------------------------------ internals
    def _write_holder(self) -> None:
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                  "proc_start": process_start(os.getpid()), "shard_index": self.shard[0], "num_shards": self.shard[1],
                  "command": _command()}
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(holder).encode(), 0)

    def _live_overlapping(self):
        """(shard, holder) of every other lock file whose shard overlaps ours and whose holder is alive."""
        return [(shard, holder) for shard, holder in live_holders(self.dir.parent, self._flock)
                if shard != self.shard and shards_overlap(self.shard, shard)]

    def _refuse(self, holder: dict[str, Any], shard: tuple[int, int]) -> None:
        run_dir = self.dir.parent
        mine, theirs = f"shard {self.shard[0]}/{self.shard[1]}", f"shard {shard[0]}/{shard[1]}"
        what = theirs if shard == self.shard else f"{theirs}, which overlaps {mine},"
        local = holder.get("host") in (None, socket.gethostname())
        stop = f"stop it (kill {holder['pid']})" if local and holder.get("pid") else "stop it"
        other = "" if local or not holder else (f"; if that process is gone, delete {self.dir / self._name(shard)}")
        raise RunLockedError(
            f"run folder {run_dir} is in use: {what} is being run by {describe(holder)}; wait for it to finish or "
            f"{stop}, run a shard it does not cover (--shard-index/--num-shards), or choose another --out{other}",
            holder)

    @staticmethod
    def _name(shard: tuple[int, int]) -> str:
        return f"shard-{shard[0]}-of-{shard[1]}.lock"
