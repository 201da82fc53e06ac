"""Run untrusted (LLM-written) Python in an operating-system sandbox and call one of its functions on
a batch of inputs.

Isolation comes from the kernel, not from inside the interpreter (code can switch off anything that
lives in its own process). Each job is one ``bwrap`` (bubblewrap) process tree:

- **fresh namespaces**: user (the job runs as uid/gid 65534 with no capabilities and cannot create
  further user namespaces; that uid is never host root: started by root, the user namespace maps
  65534 to host uid 65534 and host root only to the set-up, see :func:`_map_ids`; started by anyone
  else, 65534 is that user), PID (the job's runner is PID 1, ``--as-pid-1``: when it exits or is
  killed, the kernel kills every process left in the namespace before bwrap sees it gone;
  ``--die-with-parent`` ties it to the caller), mount, network (only a down loopback: no TCP, no
  UDP, no abstract Unix sockets of the host), IPC, UTS and cgroup;
- **a read-only view of only what the job needs**: the interpreter and the shared libraries it
  maps, the standard library, and the package folders of the allowed third-party modules
  (:data:`ALLOWED_MODULES`), each bound read-only at its host path; nothing else of the host file
  system exists inside (no task data, no home folders, no other runs); a fresh ``/proc`` of the
  job's own PID namespace whose kernel-wide parts (``/proc/sys``, ``sysrq-trigger``, ``irq``, ``bus``,
  ``fs``, ``driver``) are empty and read-only, and a minimal read-only ``/dev`` (no writable ``/dev/shm``);
- **one private writable tmpfs per run** (``/tmp``, the working folder, size-limited), gone when the
  job ends: there is no host folder to remove or to tamper with;
- **a seccomp filter**: no process creation (``fork``/``vfork``/``clone`` without ``CLONE_THREAD``;
  threads still work), no ``ptrace``, mounts, namespaces, keyrings, BPF, ``perf_event_open``,
  ``userfaultfd``, ``io_uring`` or module/kexec calls, no SysV IPC or POSIX message queues and no
  ``memfd_create`` (memory that the address-space limit would not see);
- **rlimits**: CPU seconds, address space, file size, open files, no core dumps; a scrubbed
  environment (no secrets of the caller); a wall-clock kill;
- **a cgroup** (v2, else v1 ``memory`` and ``pids``) with a memory and a process limit, where this
  process may create one (as root on most machines); :func:`cgroup_support` says which, and
  ``SandboxResult.isolation`` records what each run got.

The parent owns the protocol: the job arrives on the child's stdin, results and model calls come
back on a separate descriptor, stdout and stderr are captured separately. All descriptors are
non-blocking and served with one deadline and bounded buffers, so the parent never blocks on the
child. A job that was killed, exceeded a limit, broke the protocol or exited non-zero is never
``ok`` and its outputs are discarded, whatever it wrote. The job's result is never trusted: a
result whose shape the runner could not have produced (outputs beside a load error, an output next to
its own error, the wrong count) is a protocol violation, and every output is validated (finite
numbers, and the caller's check, e.g. a score range). Callers read :meth:`SandboxResult.valid_outputs`.

Calls to a model from inside the sandbox go through that pipe RPC (``rpc`` handlers), never the
network: the sandboxed code calls ``generate(prompt, image_ids)``.

Needs ``bwrap`` (Debian/Ubuntu package ``bubblewrap``, installed by ``scripts/install.sh``) and
user namespaces; :func:`check_bwrap` raises a one-line :class:`SandboxUnavailable` otherwise.
"""
from __future__ import annotations

import functools
import json
import math
import os
import platform
import resource
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

from embeval.errors import ConfigError

#: modules imported before user code runs; only these third-party packages exist inside the sandbox
ALLOWED_MODULES = ("re", "json", "math", "string", "statistics", "collections", "itertools", "functools",
                   "typing", "dataclasses", "decimal", "fractions", "unicodedata", "difflib", "numpy")
BWRAP_PACKAGE = "bubblewrap"
BWRAP_CANDIDATES = ("/usr/bin/bwrap", "/bin/bwrap")  # where to look when bwrap is not on PATH
SANDBOX_UID = 65534  # the job's uid and gid inside the sandbox


def _host_uid() -> int:
    """The host uid and gid of a job that root starts: 65534 ("nobody"), or EMBEVAL_SANDBOX_HOST_UID
    on a machine where nobody owns something; never 0."""
    raw = os.environ.get("EMBEVAL_SANDBOX_HOST_UID", "65534")
    if not raw.isdigit() or not 0 < int(raw) < (1 << 32) - 1:
        raise ConfigError(f"EMBEVAL_SANDBOX_HOST_UID={raw[:40]!r}: must be an unprivileged uid, 1..4294967294 "
                          "(an id that owns no file or process on this machine)")
    return int(raw)


#: the host uid and gid of the job when root starts it (an unprivileged id that owns nothing)
SANDBOX_HOST_UID = _host_uid()
#: parts of the job's /proc that reach beyond its PID namespace: covered by empty read-only folders
PROC_HIDDEN_DIRS = ("sys", "irq", "bus", "fs", "driver", "sysvipc", "tty", "pressure")
PROC_HIDDEN_FILES = ("sysrq-trigger", "kcore", "kmsg", "keys", "timer_list", "cmdline")
_TAIL = 64 << 10  # bytes of stdout / stderr kept for the report
_MAX_PENDING_REPLIES = 1 << 20  # RPC reply bytes the child has not read yet before it counts as a flood


class SandboxUnavailable(ConfigError):
    """bwrap is missing or cannot create namespaces here."""


@dataclass
class SandboxLimits:
    cpu_seconds: int = 10
    wall_seconds: float = 20.0
    memory_bytes: int = 1 << 30  # address space
    file_size_bytes: int = 1 << 20
    max_open_files: int = 64
    max_output_bytes: int = 4 << 20  # protocol + stdout + stderr bytes read back from the sandbox
    tmpfs_bytes: int = 16 << 20  # size of the private writable /tmp
    max_rpc_calls: int = 10_000  # model calls per run (plus one ``begin`` per input when announced)
    max_processes: int = 64  # threads and processes of the job (cgroup ``pids.max``, where a cgroup is available)
    cgroup_memory_bytes: int | None = None  # cgroup memory cap; None: memory_bytes + tmpfs_bytes

    def cgroup_memory(self) -> int:
        """Bytes the job's cgroup may hold in all: heap, /tmp, pipes and kernel memory."""
        return self.cgroup_memory_bytes if self.cgroup_memory_bytes is not None else self.memory_bytes + self.tmpfs_bytes


@dataclass
class SandboxResult:
    """Outcome of one sandbox run: per-input outputs or errors, plus how the process ended.

    ``ok`` only when the job returned its result through the protocol, exited with status 0 and
    hit no limit; otherwise ``outputs`` and ``errors`` are empty (nothing it wrote is trusted)."""

    ok: bool
    outputs: list[Any] = field(default_factory=list)  # per input: the return value (JSON) or None
    errors: list[str | None] = field(default_factory=list)  # per input: the exception / rejection text or None
    load_error: str | None = None  # the code failed to compile / define the entry point
    killed: str | None = None  # "wall-clock", "cpu", "output limit", "rpc limit", "rpc flood", "protocol", "signal N"
    returncode: int | None = None
    stderr: str = ""
    stdout: str = ""
    seconds: float = 0.0
    isolation: dict[str, Any] = field(default_factory=dict)

    def valid_outputs(self) -> list[Any]:
        """One entry per input: the output where the run is ``ok``, the code loaded, the input raised
        no error and the output passed every check; None everywhere else. The only way callers read
        what the job returned (``outputs`` of a run that is not ok are empty anyway)."""
        if not self.ok or self.load_error:
            return [None] * len(self.errors) if self.ok else []
        return [o if e is None else None for o, e in zip(self.outputs, self.errors)]

    def first_error(self) -> str | None:
        if self.load_error:
            return self.load_error
        if self.killed:
            return f"the sandbox killed the code ({self.killed}); stderr: {self.stderr[-500:]}"
        if not self.ok:
            return f"the sandbox process failed (return code {self.returncode}); stderr: {self.stderr[-800:]}"
        return next((e for e in self.errors if e), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- checks on outputs

def finite_problem(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` (decoded JSON) is not acceptable: a non-finite number or a string that is not valid
    Unicode (a lone surrogate such as ``"\\ud800"``, which no UTF-8 writer downstream accepts) anywhere,
    or nesting over 32."""
    if depth > 32:
        return "output nested deeper than 32 levels"
    if isinstance(value, float) and not math.isfinite(value):
        return f"non-finite number {value!r}"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a string that is not valid Unicode (lone surrogate)"
        return None
    if isinstance(value, list):
        return next((p for p in (finite_problem(v, depth + 1) for v in value) if p), None)
    if isinstance(value, dict):
        return next((p for p in (finite_problem(v, depth + 1) for v in (*value.keys(), *value.values())) if p), None)
    return None


def score_check(lo: float = 0.0, hi: float = 1.0) -> Callable[[Any], str | None]:
    """A check for :func:`run_sandboxed`: the output must be a finite number in ``[lo, hi]``."""
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"must return a number in [{lo:g}, {hi:g}], got {type(v).__name__} {v!r:.60}"
        # ints compare exactly with the bounds (math.isfinite(10**400) raises OverflowError); floats may be NaN
        if not (lo <= v <= hi) or (isinstance(v, float) and not math.isfinite(v)):
            return f"must return a finite number in [{lo:g}, {hi:g}], got {type(v).__name__} {str(v)[:60]}"
        return None
    return check


def text_check(v: Any) -> str | None:
    """A check for :func:`run_sandboxed`: the output must be a string of at most
    :data:`~embeval_analysis.a2eval.scorers.MAX_PREDICTION_CHARS` characters (the host scores it)."""
    from embeval_analysis.a2eval.scorers import MAX_PREDICTION_CHARS

    if not isinstance(v, str):
        return f"must return a string, got {type(v).__name__} {v!r:.60}"
    if len(v) > MAX_PREDICTION_CHARS:
        return f"must return a prediction of at most {MAX_PREDICTION_CHARS} characters, got {len(v)}"
    return None


# --------------------------------------------------------------------------- the job's runner

_RUNNER = r'''
import sys, os, json, traceback, resource, signal
cfg = json.loads(sys.argv[1])
# the runner is PID 1 of its namespace, which ignores signals it has no handler for: the CPU limit's
# SIGXCPU ends the job explicitly (the hard limit's SIGKILL one second later cannot be ignored)
signal.signal(signal.SIGXCPU, lambda *a: os._exit(128 + signal.SIGXCPU))
if cfg["drop"]:  # started by root: uid 0 here is host root, kept only for the set-up; become the sandbox uid
    uid, gid = cfg["drop"]
    os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)
    # the uid change cleared the parent-death signal that bwrap's --die-with-parent set: arm it again
    # (seccomp lets prctl(PR_SET_PDEATHSIG) set SIGKILL only, so the job cannot disarm it)
    import ctypes
    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:
        os.write(2, b"sandbox: refusing to run: cannot arm the parent-death signal\n")
        os._exit(125)
    # a caller that died before the signal was armed again left no one to kill the job: its end of stdin is
    # closed then (only the caller holds it), so stop here
    import select
    _p = select.poll(); _p.register(0, select.POLLIN)
    if any(ev & select.POLLHUP for _, ev in _p.poll(0)):
        os.write(2, b"sandbox: the caller is gone; not running\n")
        os._exit(125)
if cfg["uid"] is not None:  # isolated: the job must be the sandbox uid with no capability it can use
    st = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
    caps = {k: int(st[k], 16) for k in ("CapPrm", "CapEff", "CapAmb", "CapInh")}
    # an inheritable set left from the drop grants nothing under no_new_privs (seccomp's precondition)
    unusable = not (caps["CapPrm"] or caps["CapEff"] or caps["CapAmb"]) and (not caps["CapInh"] or int(st.get("NoNewPrivs", "0")) == 1)
    if os.getresuid() != (cfg["uid"],) * 3 or os.getresgid() != (cfg["uid"],) * 3 or os.getgroups() or not unusable:
        os.write(2, f"sandbox: refusing to run: could not drop to uid {cfg['uid']} with no usable capability "
                    f"(uids {os.getresuid()}, caps {caps})\n".encode())
        os._exit(125)
for lim, soft, hard in cfg["rlimits"]:  # before any job code; without capabilities they cannot be raised again
    resource.setrlimit(lim, (soft, hard))
sys.path[:] = cfg["path"]
PROTO = cfg["proto_fd"]
os.closerange(3, PROTO); os.closerange(PROTO + 1, 1 << 16)  # nothing but stdio and the protocol is inherited
inp = os.fdopen(0, "rb")
def _send(msg):
    data = (json.dumps(msg) + "\n").encode()
    while data:
        data = data[os.write(PROTO, data):]
job = json.loads(inp.readline())
def _rpc(kind, **kw):
    _send({"rpc": kind, **kw})
    line = inp.readline()
    if not line:
        raise RuntimeError("sandbox: the parent closed the model channel")
    rep = json.loads(line)
    if "error" in rep:
        raise RuntimeError(rep["error"])
    return rep["result"]
def generate(prompt, image_ids=None):
    """Ask the model under test (served by the parent) about the current document's images."""
    return _rpc("generate", prompt=str(prompt), image_ids=list(image_ids or []))
ns = {"__name__": "sandboxed", "generate": generate}
out = {"outputs": [], "errors": [], "load_error": None}
try:
    exec(compile(job["code"], "<synthesised>", "exec"), ns)
    fn = ns[job["entry"]]
    if not callable(fn):
        raise TypeError(f"{job['entry']} is not a function")
except BaseException as e:
    out["load_error"] = "".join(traceback.format_exception_only(type(e), e)).strip()
    fn = None
if fn is not None:
    for k, args in enumerate(job["inputs"]):
        try:
            if job["announce"]:
                _rpc("begin", index=k)
            r = fn(*args)
            json.dumps(r)
            out["outputs"].append(r); out["errors"].append(None)
        except BaseException as e:
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"line {f.lineno}" for f in reversed(tb) if f.filename == "<synthesised>"), "")
            out["outputs"].append(None)
            out["errors"].append(f"{type(e).__name__}: {e}" + (f" ({where})" if where else ""))
sys.stdout.flush(); sys.stderr.flush()
_send({"result": out})
os._exit(0)
'''

# --------------------------------------------------------------------------- what the job may see

_PROBE = r'''
import sys, os, json
mods, site = json.loads(sys.argv[1]), json.loads(sys.argv[2])
stdlib = os.path.realpath(os.path.dirname(os.__file__))
sys.path[:] = [stdlib, os.path.join(stdlib, "lib-dynload")] + site
before = set(sys.modules)
for m in mods:
    __import__(m)
roots = {}
for name in set(sys.modules) - before:
    mod = sys.modules[name]
    f = getattr(mod, "__file__", None)
    if not f:
        continue
    f = os.path.realpath(f)
    if f.startswith(stdlib + os.sep):
        continue
    top = sys.modules.get(name.split(".")[0])
    tf = os.path.realpath(getattr(top, "__file__", None) or f)
    root = os.path.dirname(tf) if os.path.basename(tf).startswith("__init__.") else tf
    roots[root] = os.path.dirname(root)
maps = sorted({l.split(None, 5)[5].strip() for l in open("/proc/self/maps") if len(l.split(None, 5)) == 6})
print(json.dumps({"stdlib": stdlib, "exe": os.path.realpath(sys.executable), "roots": roots,
                  "maps": [m for m in maps if m.startswith("/") and not m.endswith("(deleted)")]}))
'''


@dataclass(frozen=True)
class SandboxView:
    """The read-only file system of a job: ``binds`` (host path == sandbox path), ``symlinks``
    (link -> target), ``hide`` (folders inside a bind replaced by an empty read-only tmpfs)."""

    exe: str
    path: tuple[str, ...]  # sys.path inside
    binds: tuple[tuple[str, str], ...]  # (host source, sandbox destination)
    symlinks: tuple[tuple[str, str], ...]  # (target, link)
    hide: tuple[str, ...]

    def parents(self) -> list[str]:
        """Folders above the bound paths that are not bound themselves (``/root``, ``/usr/lib``, ...),
        outermost first. bwrap would create them with the host folder's mode (``/root`` 0700): the job,
        which is not the set-up's uid when root starts it, could not reach the files bound below."""
        dests = [d for _, d in self.binds] + [link for _, link in self.symlinks]
        inside = lambda p: any(p == d or p.startswith(d.rstrip("/") + "/") for _, d in self.binds)  # noqa: E731
        out: set[str] = set()
        for d in dests:
            p = os.path.dirname(d.rstrip("/"))
            while p not in ("/", "") and not inside(p):
                out.add(p)
                p = os.path.dirname(p)
        return sorted(out, key=lambda p: (p.count("/"), p))

    def bwrap_args(self) -> list[str]:
        a: list[str] = []
        for p in self.parents():  # traversable by the job, read-only with the rest of the root at the end
            a += ["--perms", "0755", "--dir", p]
        for src, dst in self.binds:
            a += ["--ro-bind", src, dst]
        for target, link in self.symlinks:
            a += ["--symlink", target, link]
        for h in self.hide:
            a += ["--tmpfs", h, "--remount-ro", h]
        return a


def _elf_interpreter(path: str) -> str | None:
    """The program interpreter (PT_INTERP) of a 64-bit little-endian ELF file, or None."""
    with open(path, "rb") as fh:
        head = fh.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return None
        phoff, = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        for i in range(phnum):
            fh.seek(phoff + i * phentsize)
            p_type, _, p_offset, _, _, p_filesz = struct.unpack("<IIQQQQ", fh.read(40))
            if p_type == 3:
                fh.seek(p_offset)
                return fh.read(p_filesz).rstrip(b"\0").decode()
    return None


@functools.lru_cache(maxsize=8)
def sandbox_view(allowed_modules: tuple[str, ...] = ALLOWED_MODULES) -> SandboxView:
    """Work out (once per process) what a job needs: import ``allowed_modules`` in a probe
    interpreter started like the job's (``-I -S``, the standard library and this environment's
    site-packages on the path) and keep the files it mapped, the standard library and the package
    folders those imports loaded. The sandboxed code imports on demand from this view."""
    site = sorted({os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")})
    try:
        out = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", _PROBE, json.dumps(list(allowed_modules)),
                              json.dumps(site)],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except subprocess.CalledProcessError as exc:
        raise ConfigError(f"sandbox: cannot import the allowed modules {list(allowed_modules)}: "
                          f"{(exc.stderr.strip().splitlines() or ['?'])[-1]}; install them or remove them from the list") from None
    info = json.loads(out)
    stdlib, exe = info["stdlib"], info["exe"]
    dynload = os.path.join(stdlib, "lib-dynload")
    dirs = [stdlib] + sorted(info["roots"])  # bound whole
    under = lambda p: any(p == d or p.startswith(d + os.sep) for d in dirs)  # noqa: E731
    files = sorted({os.path.realpath(m) for m in info["maps"] + [exe]} - {""})
    files = [f for f in files if os.path.isfile(f) and not under(f)]
    binds = [(d, d) for d in dirs] + [(f, f) for f in files]
    interp = _elf_interpreter(exe)
    if interp and os.path.realpath(interp) != interp:
        binds.append((os.path.realpath(interp), interp))
    # the sonames the dynamic loader looks up (libz.so.1 -> libz.so.1.2.13) next to each mapped library
    links = []
    wanted = set(files)
    for d in sorted({os.path.dirname(f) for f in files}):
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_symlink() and os.path.realpath(e.path) in wanted and e.path not in wanted:
                links.append((os.readlink(e.path), e.path))
    site = os.path.join(stdlib, "site-packages")
    hide = (site,) if os.path.isdir(site) and site not in info["roots"].values() else ()
    path = tuple([stdlib, dynload] + sorted(set(info["roots"].values())))
    return SandboxView(exe, path, tuple(binds), tuple(links), hide)


# --------------------------------------------------------------------------- seccomp

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_CLONE = {"x86_64": 56, "aarch64": 220}
_CLONE3 = 435
_FORK = {"x86_64": (57, 58), "aarch64": ()}  # fork, vfork (aarch64 has only clone)
#: shared memory the address-space limit does not see: SysV shm/sem/msg, POSIX message queues, memfd_create,
#: memfd_secret (a job's private /tmp is size-capped; these are not)
_IPC = {"x86_64": (29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220, 240, 241, 242, 243, 244, 245, 319, 447),
        "aarch64": tuple(range(180, 198)) + (279, 447)}
#: machine-wide budgets and views (found by the round-3 red team): Linux AIO contexts (fs.aio-max-nr is host-wide),
#: fanotify (watches host processes' file accesses), sync/syncfs (writeback of every host file system), modify_ldt
_HOST = {"x86_64": (206, 207, 208, 209, 210, 333, 300, 162, 306, 154),
         "aarch64": (0, 1, 2, 3, 4, 292, 262, 81, 267)}
_PRCTL = {"x86_64": 157, "aarch64": 167}
_PR_SET_PDEATHSIG = 1
_SOCKET = {"x86_64": (41, 53), "aarch64": (198, 199)}  # socket, socketpair
#: address families a job may open sockets of (in its own empty network namespace); AF_VSOCK, AF_NETLINK and
#: the rest are machine-wide or kernel-facing: EAFNOSUPPORT
SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
_EAFNOSUPPORT = 97
_DENY = {  # ptrace, process_vm_*, keyrings, mount family, namespaces, bpf, perf, userfaultfd, io_uring, kexec, modules
    "x86_64": (101, 310, 311, 248, 249, 250, 165, 166, 155, 161, 272, 308, 321, 298, 323, 425, 426, 427, 246, 320,
               175, 313, 176, 169, 167, 168, 163, 103, 303, 304, 428, 429, 430, 431, 432, 433, 442),
    "aarch64": (117, 270, 271, 217, 218, 219, 40, 39, 41, 51, 97, 268, 280, 241, 282, 425, 426, 427, 104, 294,
                105, 273, 106, 142, 224, 225, 89, 116, 264, 265, 428, 429, 430, 431, 432, 433, 442),
}
_CLONE_THREAD = 0x00010000
_RET_ALLOW, _RET_KILL = 0x7FFF0000, 0x80000000
_RET_ERRNO = 0x00050000
_EPERM, _ENOSYS = 1, 38


def seccomp_program(allow_fork: bool = False, arch: str | None = None) -> bytes | None:
    """The classic-BPF seccomp filter (``struct sock_filter`` array) for bwrap's ``--seccomp``, or None
    on an architecture without a table. Denied calls (see ``_DENY``, ``_IPC`` and ``_HOST``) fail with EPERM,
    sockets of a family outside :data:`SOCKET_FAMILIES` with EAFNOSUPPORT, ``prctl(PR_SET_PDEATHSIG)`` with any
    signal but SIGKILL with EPERM; ``clone3`` with ENOSYS (so the
    C library falls back to ``clone``, whose flags the filter can read: threads pass, processes not)."""
    arch = arch or platform.machine()
    if arch not in _AUDIT_ARCH:
        return None
    prog: list[tuple[int, Any, Any, int]] = [(0x20, 0, 0, 4), (0x15, 0, "kill", _AUDIT_ARCH[arch]), (0x20, 0, 0, 0)]
    if arch == "x86_64":
        prog.append((0x35, "eperm", 0, 0x40000000))  # the x32 ABI
    deny = _DENY[arch] + _IPC[arch] + _HOST[arch] + (() if allow_fork else _FORK[arch])
    prog += [(0x15, "eperm", 0, nr) for nr in deny]
    prog.append((0x15, "enosys", 0, _CLONE3))
    # prctl(PR_SET_PDEATHSIG, sig): only SIGKILL, so the job cannot disarm the runner's parent-death signal
    prog += [(0x15, 0, 4, _PRCTL[arch]), (0x20, 0, 0, 16), (0x15, 0, "allow", _PR_SET_PDEATHSIG),
             (0x20, 0, 0, 24), (0x15, "allow", "eperm", signal.SIGKILL)]
    # socket / socketpair: only the families in SOCKET_FAMILIES
    fam = [(0x15, "allow", 0, f) for f in SOCKET_FAMILIES[:-1]] + [(0x15, "allow", "eafnosupport", SOCKET_FAMILIES[-1])]
    prog += [(0x15, 1, 0, _SOCKET[arch][0]), (0x15, 0, 1 + len(fam), _SOCKET[arch][1]), (0x20, 0, 0, 16)] + fam
    if not allow_fork:
        prog += [(0x15, 0, "allow", _CLONE[arch]), (0x20, 0, 0, 16), (0x45, "allow", "eperm", _CLONE_THREAD)]
    labels = {"allow": len(prog), "eperm": len(prog) + 1, "enosys": len(prog) + 2, "kill": len(prog) + 3,
              "eafnosupport": len(prog) + 4}
    prog += [(0x06, 0, 0, _RET_ALLOW), (0x06, 0, 0, _RET_ERRNO | _EPERM), (0x06, 0, 0, _RET_ERRNO | _ENOSYS),
             (0x06, 0, 0, _RET_KILL), (0x06, 0, 0, _RET_ERRNO | _EAFNOSUPPORT)]
    rel = lambda j, i: labels[j] - i - 1 if isinstance(j, str) else j  # noqa: E731
    return b"".join(struct.pack("<HBBI", c, rel(jt, i), rel(jf, i), k) for i, (c, jt, jf, k) in enumerate(prog))


# --------------------------------------------------------------------------- bwrap

@dataclass(frozen=True)
class Bwrap:
    """A working bwrap and the optional hardening its version supports."""

    path: str
    disable_userns: bool  # --disable-userns (bwrap >= 0.8): no nested user namespaces
    tmpfs_size: bool  # --size for --tmpfs (bwrap >= 0.8)


_BASE_FLAGS = ["--unshare-all", "--unshare-user", "--die-with-parent", "--as-pid-1", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox", "--clearenv"]


@functools.lru_cache(maxsize=1)
def check_bwrap() -> Bwrap:
    """A working ``bwrap``; raises :class:`SandboxUnavailable` with the fix otherwise."""
    path = shutil.which("bwrap") or next((p for p in BWRAP_CANDIDATES if os.path.exists(p)), None)
    if path is None:
        raise SandboxUnavailable(f"the A2Eval sandbox needs bwrap: install the package '{BWRAP_PACKAGE}' "
                                 f"(apt-get install -y {BWRAP_PACKAGE}, or run scripts/install.sh as root)")

    def works(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([path, *_BASE_FLAGS, *_id_flags(False), *extra, "--ro-bind", "/", "/", "true"], capture_output=True,
                              text=True, timeout=30)

    r = works()
    if r.returncode != 0:
        raise SandboxUnavailable(f"bwrap cannot create namespaces here ({r.stderr.strip()[:200]}); allow user "
                                 "namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces>0) "
                                 "or run as root")
    return Bwrap(path, works("--disable-userns").returncode == 0,
                 works("--size", "65536", "--tmpfs", "/tmp").returncode == 0)


def scrubbed_env(home: str = "/tmp") -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _id_flags(as_root: bool) -> list[str]:
    """bwrap's identity flags. Run by anyone but root, bwrap maps :data:`SANDBOX_UID` to the caller
    (an unprivileged host uid). Run by root that map would make the job host root (``65534 0 1``):
    instead bwrap waits (``--userns-block-fd``) for :func:`_map_ids` to map host root to 0 (for the
    set-up alone) and :data:`SANDBOX_HOST_UID` to :data:`SANDBOX_UID`, and the runner's first step
    drops to that uid with the only two capabilities it keeps for it (CAP_SETUID, CAP_SETGID)."""
    if as_root:
        return ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL"]


def _bwrap_argv(bw: Bwrap, view: SandboxView, limits: SandboxLimits, info_fd: int, seccomp_fd: int | None,
                block_fd: int | None = None) -> list[str]:
    """``block_fd``: root's mode (see :func:`_id_flags`), the read end bwrap waits on for the id maps."""
    a = [bw.path, *_BASE_FLAGS]
    if block_fd is not None:  # --disable-userns cannot be combined with it: seccomp refuses new namespaces
        a += ["--userns-block-fd", str(block_fd)] + _id_flags(True)
    else:
        a += _id_flags(False) + (["--disable-userns"] if bw.disable_userns else [])
    for k, v in scrubbed_env("/tmp").items():
        a += ["--setenv", k, v]
    # a fresh /proc of the job's PID namespace, less what reaches the whole machine (sysctls, sysrq, ...)
    a += ["--proc", "/proc"]
    for d in PROC_HIDDEN_DIRS:
        if os.path.isdir(f"/proc/{d}"):
            a += ["--tmpfs", f"/proc/{d}", "--remount-ro", f"/proc/{d}"]
    for f in PROC_HIDDEN_FILES:
        if os.path.exists(f"/proc/{f}"):
            a += ["--ro-bind", "/dev/null", f"/proc/{f}"]
    # the private /tmp first, then the read-only view: a runtime that itself lies under /tmp (a checkout or
    # virtual environment there) is bound on top of the tmpfs instead of being hidden by it
    a += ["--dev", "/dev", "--perms", "1777"] + (["--size", str(limits.tmpfs_bytes)] if bw.tmpfs_size else [])
    a += ["--tmpfs", "/tmp"]
    a += view.bwrap_args()
    # /dev read-only: its tmpfs (and the /dev/shm folder on it) has no size limit of its own
    a += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        a += ["--seccomp", str(seccomp_fd)]
    return a + ["--"]


def _read_info(fd: int, seconds: float) -> dict[str, Any]:
    """bwrap's ``--info-fd`` JSON (``child-pid`` is the job's pid as this process sees it), read within
    ``seconds``; raises SandboxUnavailable when bwrap closed it empty or too late."""
    buf = bytearray()
    deadline = time.monotonic() + seconds
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    try:
        while len(buf) < 4096:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise SandboxUnavailable(f"bwrap did not start the job within {seconds:g} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            try:
                return json.loads(buf)
            except ValueError:
                continue
    finally:
        sel.close()
    try:
        return json.loads(buf)
    except ValueError:
        raise SandboxUnavailable(f"bwrap did not report the job's pid (info: {bytes(buf[:200])!r})") from None


def _map_ids(pid: int) -> None:
    """Write the user namespace's id maps of root's mode: inside 0 = host root (bwrap's set-up only,
    needed to bind folders that only root may enter, such as an interpreter under /root), inside
    :data:`SANDBOX_UID` = host :data:`SANDBOX_HOST_UID`. One write each, as the kernel requires."""
    line = f"0 0 1\n{SANDBOX_UID} {SANDBOX_HOST_UID} 1\n".encode()
    for name in ("uid_map", "gid_map"):
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- cgroups

def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, super options) of the cgroup file systems."""
    out = []
    try:
        lines = open("/proc/self/mountinfo").read().splitlines()
    except OSError:
        return out
    for ln in lines:
        left, _, right = ln.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) >= 5 and len(r) >= 3 and r[0] in ("cgroup", "cgroup2"):
            out.append((f[4].replace("\\040", " "), r[0], set(r[2].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per hierarchy: ``{"": path}`` for v2, ``{"memory": path, ...}`` for v1."""
    own = {}
    try:
        for ln in open("/proc/self/cgroup").read().splitlines():
            _, ctrl, path = ln.split(":", 2)
            for c in ctrl.split(",") if ctrl else [""]:
                own[c] = path
    except (OSError, ValueError):
        pass
    return own


def _cgroup_dirs() -> tuple[str, list[str], str | None]:
    """(version, [parent folders to create the job's cgroup under], reason when there is none)."""
    if os.geteuid() != 0:
        return "none", [], "not root: cgroups are only used when embeval runs as root (rlimits still hold)"
    mounts, own = _mounts(), _own_cgroups()
    v2 = next((m for m, t, _ in mounts if t == "cgroup2"), None)
    if v2 is not None and "" in own:
        parent = os.path.join(v2, own[""].lstrip("/"))
        try:
            ctl = open(os.path.join(parent, "cgroup.controllers")).read().split()
            sub = open(os.path.join(parent, "cgroup.subtree_control")).read().split()
            if {"memory", "pids"} <= set(ctl):
                if not {"memory", "pids"} <= set(sub):
                    with open(os.path.join(parent, "cgroup.subtree_control"), "w") as fh:
                        fh.write("+memory +pids")
                if os.access(parent, os.W_OK):
                    return "v2", [parent], None
        except OSError:
            pass
    dirs = []
    for ctrl in ("memory", "pids"):
        m = next((m for m, t, o in mounts if t == "cgroup" and ctrl in o), None)
        if m is None or ctrl not in own:
            return "none", [], f"no cgroup v2 with memory+pids delegated here and no v1 '{ctrl}' hierarchy"
        parent = os.path.join(m, own[ctrl].lstrip("/"))
        if not os.access(parent, os.W_OK):
            return "none", [], f"cgroup v1 {parent} is not writable"
        dirs.append(parent)
    return "v1", dirs, None


_CG_PREFIX = "embeval-sandbox-"


def _kill_cgroup_tasks(folder: str) -> None:
    """SIGKILL every task listed in ``folder`` (a job's cgroup)."""
    try:
        pids = [int(p) for p in open(os.path.join(folder, "cgroup.procs")).read().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _rmdir_cgroup(folder: str, seconds: float) -> bool:
    """Remove a job's cgroup, killing what is still in it; False when it is still busy after ``seconds``
    (a PID namespace with very many files in its tmpfs takes seconds to tear down)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.rmdir(folder)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            _kill_cgroup_tasks(folder)
            time.sleep(0.02)


@functools.lru_cache(maxsize=None)
def _sweep_stale_cgroups(parent: str) -> int:
    """Once per process and parent folder: remove the job cgroups that a killed embeval process left
    (``embeval-sandbox-<pid>-<id>`` whose creator ``pid`` is gone), killing any task still in them.
    Returns how many were removed."""
    n = 0
    try:
        names = [e.name for e in os.scandir(parent) if e.name.startswith(_CG_PREFIX) and e.is_dir()]
    except OSError:
        return 0
    for name in names:
        try:
            creator = int(name[len(_CG_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if creator == os.getpid() or os.path.exists(f"/proc/{creator}"):
            continue  # alive (or a reused pid: left alone, never another live process's cgroup)
        n += _rmdir_cgroup(os.path.join(parent, name), 2.0)
    return n


class _Cgroup:
    """The job's own cgroup (memory and process caps), created per run and removed after it."""

    def __init__(self, version: str, dirs: list[str], limits: SandboxLimits):
        self.version = version
        self.memory, self.pids = limits.cgroup_memory(), limits.max_processes
        for d in dirs:
            _sweep_stale_cgroups(d)
        made: list[str] = []
        for _ in range(8):  # a random name: a folder left by a dead process with our pid is never reused
            name = f"{_CG_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
            self.paths = [os.path.join(d, name) for d in dirs]
            if not any(os.path.exists(p) for p in self.paths):
                break
        try:
            for p in self.paths:
                os.mkdir(p, 0o755)  # FileExistsError: raced with another creator; the caller fails closed
                made.append(p)
            if version == "v2":
                self._write(self.paths[0], "memory.max", self.memory)
                self._write(self.paths[0], "memory.swap.max", 0, optional=True)
                self._write(self.paths[0], "pids.max", self.pids)
            else:
                self._write(self.paths[0], "memory.limit_in_bytes", self.memory)
                self._write(self.paths[0], "memory.memsw.limit_in_bytes", self.memory, optional=True)
                self._write(self.paths[1], "pids.max", self.pids)
        except OSError:
            for p in made:
                try:
                    os.rmdir(p)
                except OSError:
                    pass
            raise

    @staticmethod
    def _write(folder: str, name: str, value: Any, optional: bool = False) -> None:
        try:
            with open(os.path.join(folder, name), "w") as fh:
                fh.write(str(value))
        except OSError:
            if not optional:
                raise

    def add(self, pid: int) -> None:
        for p in self.paths:
            self._write(p, "cgroup.procs", pid)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the job for the memory cap."""
        try:
            if self.version == "v2":
                ev = open(os.path.join(self.paths[0], "memory.events")).read().split()
            else:
                ev = open(os.path.join(self.paths[0], "memory.oom_control")).read().split()
            return int(dict(zip(ev[::2], ev[1::2])).get("oom_kill", "0")) > 0
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        """Remove the cgroup once the PID namespace's last process is reaped; any task still in it after
        the job's end is killed (the folder of a job that would not die is left for the next sweep)."""
        for p in self.paths:
            _rmdir_cgroup(p, 10.0)

    def describe(self) -> dict[str, Any]:
        return {"version": self.version, "memory_bytes": self.memory, "pids_max": self.pids}


def cgroup_support() -> dict[str, Any]:
    """Which cgroup the sandbox would give its jobs here: ``{"version": "v2"|"v1"|"none", "reason": ...}``."""
    version, dirs, reason = _cgroup_dirs()
    return {"version": version, "parents": dirs, "reason": reason}


def _job_cgroup(limits: SandboxLimits) -> tuple[_Cgroup | None, str | None]:
    """The job's cgroup, or (None, why) where the machine offers none. Where it offers one and this run
    cannot get it, the run is refused (fail closed): a job must never run uncapped by accident."""
    version, dirs, reason = _cgroup_dirs()
    if not dirs:
        return None, reason
    try:
        return _Cgroup(version, dirs, limits), None
    except OSError as exc:
        raise SandboxUnavailable(f"sandbox: cannot create the job's cgroup under {dirs[0]} ({exc.strerror or exc}); "
                                 "nothing ran. Remove stale embeval-sandbox-* folders there, or free the "
                                 "cgroup hierarchy") from None


def _rlimits(limits: SandboxLimits) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) for the runner; CPU: SIGXCPU at the soft limit, SIGKILL one second later."""
    return [(resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1)] + [
        (lim, val, val) for lim, val in ((resource.RLIMIT_AS, limits.memory_bytes),
                                         (resource.RLIMIT_FSIZE, limits.file_size_bytes), (resource.RLIMIT_CORE, 0),
                                         (resource.RLIMIT_NOFILE, limits.max_open_files))]


# --------------------------------------------------------------------------- running a job

def run_sandboxed(code: str, entry: str, inputs: Sequence[Sequence[Any]], limits: SandboxLimits | None = None,
                  rpc: Mapping[str, Callable[..., Any]] | None = None, allowed_modules: Sequence[str] = ALLOWED_MODULES,
                  announce: bool = False, check: Callable[[Any], str | None] | None = None,
                  allow_fork: bool = False) -> SandboxResult:
    """Define ``code`` in a fresh sandbox and call ``entry(*args)`` for each ``args`` in ``inputs``.

    ``inputs`` and return values must be JSON-serialisable; batch many inputs per call (one
    sandbox start-up per call). ``rpc`` maps a name (``"generate"``) to a parent-side handler taking
    the request's keyword arguments. ``announce``: before each input the runner calls the ``begin``
    handler with ``index=k``, so model calls can be tied to input k. ``check(output)`` returns a
    reason to reject an output (after the built-in finiteness check); a rejected output becomes
    None with the reason as its error. ``allow_fork`` lifts the seccomp ban on process creation
    (tests use it to show that the PID namespace alone reaps every process). Never raises for the
    code's behaviour: errors, kills and limits are reported in the :class:`SandboxResult`.
    """
    return _run(code, entry, inputs, limits or SandboxLimits(), rpc or {}, tuple(allowed_modules), announce, check,
                allow_fork, isolate=True)


def _run(code, entry, inputs, limits: SandboxLimits, rpc, allowed: tuple[str, ...], announce: bool, check,
         allow_fork: bool, isolate: bool) -> SandboxResult:
    """``isolate=False`` runs the same runner as a plain subprocess: the baseline of ``make bench`` only."""
    if not isinstance(code, str) or not code.strip():
        raise ConfigError("run_sandboxed: code must be non-empty Python source")
    view = sandbox_view(allowed)
    job = (json.dumps({"code": code, "entry": entry, "inputs": [list(a) for a in inputs], "announce": announce})
           + "\n").encode()
    t0 = time.monotonic()
    own: list[int] = []  # every descriptor this call opened, closed in the end
    bw = seccomp = None
    as_root = isolate and os.geteuid() == 0
    cgroup, cgroup_reason = (None, "not isolated") if not isolate else _job_cgroup(limits)
    try:
        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        proto_r, proto_w = os.pipe2(os.O_CLOEXEC)
        info_r, info_w = os.pipe2(os.O_CLOEXEC)
        own += [stdin_r, stdin_w, out_r, out_w, err_r, err_w, proto_r, proto_w, info_r, info_w]
        pass_fds = [proto_w]
        seccomp = seccomp_program(allow_fork) if isolate else None
        sc_fd = None
        if seccomp is not None:
            sc_fd = os.memfd_create("embeval-seccomp", 0)
            own.append(sc_fd)
            os.write(sc_fd, seccomp)
            os.lseek(sc_fd, 0, os.SEEK_SET)
            pass_fds.append(sc_fd)
        block_r = block_w = None
        if as_root:
            block_r, block_w = os.pipe2(os.O_CLOEXEC)
            own += [block_r, block_w]
            pass_fds.append(block_r)
        uid = SANDBOX_UID if isolate else os.getuid()
        cfg = {"path": list(view.path), "proto_fd": proto_w, "rlimits": _rlimits(limits), "uid": uid if isolate else None,
               "drop": [SANDBOX_UID, SANDBOX_UID] if as_root else None}
        runner = [view.exe, "-I", "-S", "-B", "-c", _RUNNER, json.dumps(cfg)]
        bw = check_bwrap() if isolate else None
        if bw is not None:
            argv = _bwrap_argv(bw, view, limits, info_w, sc_fd, block_r) + runner
            pass_fds.append(info_w)
        else:
            argv = runner
        proc = subprocess.Popen(argv, stdin=stdin_r, stdout=out_w, stderr=err_w, pass_fds=pass_fds,
                                env=scrubbed_env("/tmp"), cwd="/tmp", close_fds=True)
        for fd in (stdin_r, out_w, err_w, proto_w, info_w) + tuple(f for f in (sc_fd, block_r) if f is not None):
            os.close(fd)
            own.remove(fd)
        info = None
        if as_root:  # bwrap waits until the id maps are written and the job is in its cgroup
            try:
                info = _read_info(info_r, 30.0)
                _map_ids(int(info["child-pid"]))
                if cgroup is not None:
                    cgroup.add(int(info["child-pid"]))
            except (OSError, KeyError, TypeError, ValueError, SandboxUnavailable) as exc:
                proc.kill()
                proc.wait()
                raise SandboxUnavailable(f"sandbox: could not set up the job's user namespace as root ({exc}); "
                                         "nothing ran") from None
            os.write(block_w, b"1")
        res = _Session(proc, limits, rpc, t0, job, stdin_w, out_r, err_r, proto_r,
                       info_r if isolate and info is None else None, len(inputs) if announce else 0, info).serve()
        if cgroup is not None and res.killed is not None and res.killed.startswith("signal") and cgroup.oom_killed():
            res.killed = f"memory (cgroup limit {cgroup.memory} bytes)"
    finally:
        if cgroup is not None:
            cgroup.close()
        for fd in own:
            try:
                os.close(fd)
            except OSError:
                pass
    res.isolation = {"method": "bubblewrap" if isolate else "none (plain subprocess)",
                     "namespaces": ["user", "pid", "mount", "network", "ipc", "uts", "cgroup"] if isolate else [],
                     "uid": uid, "host_uid": (SANDBOX_HOST_UID if as_root else os.getuid()),
                     "id_map": "root: 0->0 (set-up), 65534->65534 (job)" if as_root else f"65534->{os.getuid()}",
                     "cgroup": cgroup.describe() if cgroup is not None else {"version": "none", "reason": cgroup_reason},
                     "proc_hidden": [d for d in PROC_HIDDEN_DIRS + PROC_HIDDEN_FILES if isolate],
                     "seccomp": isolate and seccomp is not None,
                     "allow_fork": allow_fork, "read_only_binds": len(view.binds), "limits": asdict(limits),
                     "nested_userns_disabled": bool(bw and bw.disable_userns), "tmpfs_size_limit": bool(bw and bw.tmpfs_size)}
    _validate(res, len(inputs), check)
    return res


def _validate(res: SandboxResult, n: int, check) -> None:
    """Reject what the parent cannot trust. The runner answers either a load error with no outputs, or
    exactly ``n`` outputs with ``n`` errors, each output None where its error is set; any other shape
    was written by the job itself (it owns the protocol descriptor) and the run is not ok. A run that
    is not ok keeps no outputs; each remaining output must be finite and pass ``check``."""
    if res.ok:
        if res.load_error:
            if res.outputs or res.errors:
                res.ok, res.killed = False, (f"protocol: {len(res.outputs)} outputs beside a load error "
                                             "(the runner sends none)")
        elif len(res.outputs) != n or len(res.errors) != n:
            res.ok, res.killed = False, f"protocol: {len(res.outputs)} outputs for {n} inputs"
        elif any(e is not None and o is not None for o, e in zip(res.outputs, res.errors)):
            k = next(k for k, (o, e) in enumerate(zip(res.outputs, res.errors)) if e is not None and o is not None)
            res.ok, res.killed = False, f"protocol: input {k} has both an output and an error (the runner sends one)"
    if not res.ok:
        res.outputs, res.errors = [], []
        return
    if res.load_error:
        return
    for k, v in enumerate(res.outputs):
        if res.errors[k] is not None:
            continue
        problem = finite_problem(v) or (check(v) if check is not None else None)
        if problem:
            res.outputs[k] = None
            res.errors[k] = f"output rejected for input {k}: {problem}"


class _Session:
    """The parent's side of one job: one selector over every descriptor, one deadline, bounded buffers."""

    def __init__(self, proc, limits, rpc, t0, job, stdin_w, out_r, err_r, proto_r, info_r, n_announce,
                 info: dict[str, Any] | None = None):
        self.proc, self.limits, self.rpc, self.t0 = proc, limits, rpc, t0
        self.deadline = t0 + limits.wall_seconds
        self.outbuf = bytearray(job)
        self.job_left = len(job)
        self.stdin_w = stdin_w
        self.tails = {"stdout": bytearray(), "stderr": bytearray()}
        self.proto = bytearray()
        self.info = bytearray()
        self.total = 0
        self.rpc_left = limits.max_rpc_calls + n_announce
        self.result: dict[str, Any] | None = None
        self.killed: str | None = None
        self.child_pidfd: int | None = None
        self.sel = selectors.DefaultSelector()
        for fd, kind in ((out_r, "stdout"), (err_r, "stderr"), (proto_r, "proto"), (info_r, "info")):
            if fd is not None:
                os.set_blocking(fd, False)
                self.sel.register(fd, selectors.EVENT_READ, kind)
        os.set_blocking(stdin_w, False)
        self.sel.register(stdin_w, selectors.EVENT_WRITE, "stdin")
        self.proc_fd = os.pidfd_open(proc.pid)
        self.sel.register(self.proc_fd, selectors.EVENT_READ, "exit")
        if info is not None:  # read before the job started (root's mode)
            self.info = bytearray(json.dumps(info).encode())
            self._child_started()

    def serve(self) -> SandboxResult:
        exited = False
        try:
            while not self.killed:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    self.killed = "wall-clock"
                    break
                for key, _ in self.sel.select(min(left, 1.0)):
                    if key.data == "exit":
                        exited = True
                    elif key.data == "stdin":
                        self._write()
                    else:
                        self._read(key.fd, key.data)
                    if self.killed or time.monotonic() > self.deadline:
                        break
                if exited and not self.killed:
                    self._drain()
                    break
        finally:
            self._stop()
            rc = self.proc.wait()
            for key in list(self.sel.get_map().values()):
                self.sel.unregister(key.fd)
            self.sel.close()
            for fd in (self.proc_fd, self.child_pidfd):
                if fd is not None:
                    os.close(fd)
        return self._result(rc)

    # ---- I/O
    def _write(self) -> None:
        if not self.outbuf:
            self._stop_writing()
            return
        try:
            n = os.write(self.stdin_w, self.outbuf)
        except BlockingIOError:
            return
        except OSError:  # the child closed its stdin
            self.outbuf.clear()
            self._stop_writing()
            return
        del self.outbuf[:n]
        self.job_left = max(0, self.job_left - n)
        if not self.outbuf:
            self._stop_writing()

    def _stop_writing(self) -> None:
        if self.stdin_w in self.sel.get_map():
            self.sel.unregister(self.stdin_w)

    def _want_writing(self) -> None:
        if self.stdin_w not in self.sel.get_map():
            self.sel.register(self.stdin_w, selectors.EVENT_WRITE, "stdin")

    def _read(self, fd: int, kind: str) -> bool:
        """Read one chunk; False when nothing was there."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not chunk:
            self.sel.unregister(fd)
            if kind == "info":
                self._child_started()
            return True
        if kind == "info":
            self.info += chunk[: 4096]
            if len(self.info) > 4096:
                self.sel.unregister(fd)
            return True
        self.total += len(chunk)
        if self.total > self.limits.max_output_bytes:
            self.killed = "output limit"
            return True
        if kind in self.tails:
            t = self.tails[kind]
            t += chunk
            del t[: max(0, len(t) - _TAIL)]
            return True
        self.proto += chunk
        start = 0
        while not self.killed and time.monotonic() <= self.deadline:
            end = self.proto.find(b"\n", start)
            if end < 0:
                break
            self._message(bytes(self.proto[start:end]))
            start = end + 1
        del self.proto[:start]
        return True

    def _child_started(self) -> None:
        if self.child_pidfd is not None:
            return
        try:
            pid = int(json.loads(self.info)["child-pid"])
            self.child_pidfd = os.pidfd_open(pid)
        except (ValueError, KeyError, TypeError, OSError):
            pass

    def _drain(self) -> None:
        """The job has ended: read what is already in the pipes (bounded; a process that still holds
        a pipe open cannot keep the parent here)."""
        for key in list(self.sel.get_map().values()):
            if key.data in ("stdout", "stderr", "proto", "info"):
                for _ in range(256):
                    if self.killed or key.fd not in self.sel.get_map() or not self._read(key.fd, key.data):
                        break

    # ---- protocol
    def _message(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            self.killed = "protocol: a line on the protocol descriptor is not JSON"
            return
        if not isinstance(msg, dict):
            self.killed = "protocol: a message is not an object"
        elif "result" in msg:
            r = msg["result"]
            ok = (self.result is None and isinstance(r, dict) and isinstance(r.get("outputs"), list)
                  and isinstance(r.get("errors"), list) and len(r["outputs"]) == len(r["errors"])
                  and all(e is None or isinstance(e, str) for e in r["errors"])
                  and (r.get("load_error") is None or isinstance(r.get("load_error"), str)))
            if ok:
                self.result = r
            else:
                self.killed = "protocol: malformed or repeated result"
        elif isinstance(msg.get("rpc"), str):
            self.rpc_left -= 1
            if self.rpc_left < 0:
                self.killed = "rpc limit"
                return
            self._answer(msg)
        else:
            self.killed = "protocol: unknown message"

    def _answer(self, msg: dict[str, Any]) -> None:
        kind = msg.pop("rpc")
        handler = self.rpc.get(kind)
        try:
            if handler is None:
                raise KeyError(f"no handler for {kind!r}")
            line = json.dumps({"result": handler(**msg)})
        except Exception as exc:  # the sandboxed code sees the error text, the parent goes on
            line = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        self.outbuf += (line + "\n").encode()
        if len(self.outbuf) - self.job_left > _MAX_PENDING_REPLIES:
            self.killed = "rpc flood: the code sends model calls without reading the replies"
            return
        self._want_writing()
        self._write()

    # ---- ending
    def _stop(self) -> None:
        """Always, at the end: SIGKILL the PID namespace's init, the runner (the kernel then kills every
        process left in the namespace; a no-op when it has exited), wait for bwrap to exit (kill it
        after 2 s), then wait until the init is gone, i.e. the namespace is empty."""
        for key in list(self.sel.get_map().values()):
            if key.data == "info":
                self._read(key.fd, "info")
        self._child_started()
        if self.child_pidfd is not None:
            try:
                signal.pidfd_send_signal(self.child_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif self.proc.poll() is None:
            self.proc.kill()  # no namespace yet: --die-with-parent takes bwrap's child down with it
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.child_pidfd is not None:
            sel = selectors.DefaultSelector()
            sel.register(self.child_pidfd, selectors.EVENT_READ)
            sel.select(2.0)
            sel.close()

    def _result(self, rc: int) -> SandboxResult:
        stderr = self.tails["stderr"].decode(errors="replace")
        killed = self.killed
        sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0  # bwrap reports a signal as 128 + N
        if killed is None and sig:
            killed = "cpu" if sig == signal.SIGXCPU else f"signal {sig}"
        ok = self.result is not None and killed is None and rc == 0
        res = SandboxResult(ok=ok, killed=killed, returncode=rc, stderr=stderr[-4000:],
                            stdout=self.tails["stdout"].decode(errors="replace")[-4000:],
                            seconds=time.monotonic() - self.t0)
        if ok:
            res.outputs, res.errors, res.load_error = self.result["outputs"], self.result["errors"], self.result["load_error"]
        return res
