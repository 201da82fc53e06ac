"""Run untrusted (LLM-written) Python in a sandbox and call one of its functions on a batch of inputs.

Layers, outermost first (each one alone stops the matching hostile-code test):

1. **Separate process** in its own session/process group and its own temporary directory
   (deleted afterwards); **wall-clock kill** of the whole process group at ``wall_seconds``.
2. **Scrubbed environment**: only ``PATH``, ``HOME``/``TMPDIR`` (= the sandbox folder), ``LANG`` and
   thread-count variables; no secrets, proxies or credentials from the caller survive.
3. **Resource limits** (``resource.setrlimit``): CPU seconds, address space, file size, open files,
   number of processes (``RLIMIT_NPROC``, effective once the uid is unprivileged), no core dumps.
4. **No network**: when the OS allows it, a new empty network namespace (``unshare(CLONE_NEWNET)``,
   as root; ``CLONE_NEWUSER|CLONE_NEWNET`` otherwise); in all cases the in-process guard below.
5. **Privilege drop** (when started as root): after importing the allowed modules the runner
   switches to uid/gid ``nobody``, so root-only files (and other processes' environments) are
   unreadable and ``RLIMIT_NPROC`` applies.
6. **In-process guard** (a ``sys.addaudithook`` hook, which code cannot remove): refuses sockets,
   subprocesses, ``fork``/``exec``/``kill``, ``ctypes``, writes/renames/deletes outside the sandbox
   folder, reads of ``/proc/*/environ``, and imports of modules that were not preloaded.

Calls to a model from inside the sandbox go through a pipe RPC served by the parent (``rpc``
handlers), never the network: the sandboxed code calls ``generate(prompt, image_ids)``.
"""
from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from embeval.errors import ConfigError

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
NOBODY = 65534

#: modules imported before user code runs; anything else is refused by the import guard
ALLOWED_MODULES = ("re", "json", "math", "string", "statistics", "collections", "itertools", "functools",
                   "typing", "dataclasses", "decimal", "fractions", "unicodedata", "difflib", "numpy")


@dataclass
class SandboxLimits:
    cpu_seconds: int = 10
    wall_seconds: float = 20.0
    memory_bytes: int = 1 << 30  # address space
    file_size_bytes: int = 1 << 20
    max_processes: int = 8  # beyond the sandbox's own
    max_open_files: int = 64
    max_output_bytes: int = 4 << 20  # total bytes read back from the sandbox


@dataclass
class SandboxResult:
    """Outcome of one sandbox run: per-input outputs or errors, plus how the process ended."""

    ok: bool  # process finished normally and returned results
    outputs: list[Any] = field(default_factory=list)  # per input: the return value (JSON) or None
    errors: list[str | None] = field(default_factory=list)  # per input: the exception text or None
    load_error: str | None = None  # the code failed to compile / define the entry point
    killed: str | None = None  # "wall-clock", "cpu", "memory", "signal N", "output limit"
    returncode: int | None = None
    stderr: str = ""
    seconds: float = 0.0
    isolation: dict[str, Any] = field(default_factory=dict)

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


_RUNNER = r'''
import sys, os, json, traceback
proto_in = os.fdopen(0, "r")
proto_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # user prints go to stderr, never into the protocol stream
job = json.load(open("job.json"))
for m in job["allowed"]:
    try:
        __import__(m)
    except Exception:
        pass
import builtins
SANDBOX = os.path.realpath(os.getcwd())
if job["drop_uid"] is not None:
    import resource
    resource.setrlimit(resource.RLIMIT_NPROC, (job["nproc"], job["nproc"]))
    os.setgroups([])
    os.setgid(job["drop_uid"])
    os.setuid(job["drop_uid"])
_loaded = set(sys.modules)
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_BLOCK_PREFIX = ("socket.", "subprocess.", "ctypes.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
                 "os.forkpty", "os.kill", "os.killpg", "os.system", "os.startfile", "pty.", "urllib.", "http.",
                 "ftplib.", "smtplib.", "webbrowser.", "sys._getframe", "os.setuid", "os.setgid", "resource.setrlimit")
_BLOCK_EXACT = {"os.system", "os.putenv", "os.unsetenv", "mmap.__new__"}
_PATHS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.chmod", "os.chown",
          "os.truncate", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move", "os.listdir", "os.scandir",
          "glob.glob"}
def _inside(p):
    try:
        r = os.path.realpath(os.fsdecode(p) if not isinstance(p, int) else ".")
    except Exception:
        return False
    return r == SANDBOX or r.startswith(SANDBOX + os.sep)
def _hook(event, args):
    if event in _BLOCK_EXACT or event.startswith(_BLOCK_PREFIX):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "import":
        name = args[0]
        if name.split(".")[0] not in _loaded and name not in _loaded:
            raise ImportError(f"sandbox: import of {name!r} is not allowed (allowed: {', '.join(job['allowed'])})")
    elif event == "open":
        path, mode, flags = (list(args) + [None, None, 0])[:3]
        if isinstance(path, int):
            return
        sp = os.fsdecode(path) if path is not None else ""
        if "/environ" in sp or sp.startswith("/proc/") and not sp.startswith("/proc/self/fd"):
            raise PermissionError("sandbox: reading process information is not allowed")
        writing = (flags or 0) & _WRITE or (isinstance(mode, str) and any(c in mode for c in "wax+"))
        if writing and not _inside(path):
            raise PermissionError(f"sandbox: writing outside the sandbox folder is not allowed: {sp}")
    elif event in _PATHS:
        for a in args[:2]:
            if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a):
                raise PermissionError(f"sandbox: {event} outside the sandbox folder is not allowed")
if job["guard"]:
    sys.addaudithook(_hook)
def _rpc(kind, **kw):
    proto_out.write(json.dumps({"rpc": kind, **kw}) + "\n"); proto_out.flush()
    line = proto_in.readline()
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
                _rpc("begin", index=k)  # lets the parent serve model calls for input k
            r = fn(*args)
            json.dumps(r)
            out["outputs"].append(r); out["errors"].append(None)
        except BaseException as e:
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"line {f.lineno}" for f in reversed(tb) if f.filename == "<synthesised>"), "")
            out["outputs"].append(None)
            out["errors"].append(f"{type(e).__name__}: {e}" + (f" ({where})" if where else ""))
proto_out.write(json.dumps({"result": out}) + "\n"); proto_out.flush()
os._exit(0)
'''


def _preexec(limits: SandboxLimits, isolate_net: bool, nproc_now: int, as_root: bool):
    def fn():
        os.setsid()
        if isolate_net:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWNET if as_root else (CLONE_NEWUSER | CLONE_NEWNET)) != 0:
                os.write(2, b"sandbox: network namespace unavailable; in-process guard only\n")
        # CPU: SIGXCPU at the soft limit, SIGKILL one second later
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        for lim, val in ((resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_FSIZE, limits.file_size_bytes),
                         (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, limits.max_open_files)):
            resource.setrlimit(lim, (val, val))
        if not as_root:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc_now + limits.max_processes,) * 2)

    return fn


def _user_process_count() -> int:
    uid, n = os.getuid(), 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def network_namespace_available() -> bool:
    """Whether this process may create an empty network namespace (root, or unprivileged user namespaces)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        flags = CLONE_NEWNET if os.geteuid() == 0 else (CLONE_NEWUSER | CLONE_NEWNET)
        os._exit(0 if libc.unshare(flags) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def scrubbed_env(home: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_sandboxed(code: str, entry: str, inputs: Sequence[Sequence[Any]], limits: SandboxLimits | None = None,
                  rpc: Mapping[str, Callable[..., Any]] | None = None, guard: bool = True,
                  network_namespace: bool = True, drop_privileges: bool = True,
                  allowed_modules: Sequence[str] = ALLOWED_MODULES, announce: bool = False) -> SandboxResult:
    """Define ``code`` in a sandbox and call ``entry(*args)`` for each ``args`` in ``inputs``.

    ``inputs`` and return values must be JSON-serialisable. ``rpc`` maps a name (``"generate"``)
    to a parent-side handler taking the request's keyword arguments. ``guard``,
    ``network_namespace`` and ``drop_privileges`` switch single layers off (tests use this to show
    that each OS layer contains hostile code on its own). ``announce``: before each input the runner
    calls the ``begin`` handler with ``index=k``, so model calls can be tied to input k. Never raises for the code's behaviour:
    errors, kills and limits are reported in the :class:`SandboxResult`.
    """
    limits = limits or SandboxLimits()
    if not isinstance(code, str) or not code.strip():
        raise ConfigError("run_sandboxed: code must be non-empty Python source")
    as_root = os.geteuid() == 0
    drop = NOBODY if (as_root and drop_privileges) else None
    tmp = tempfile.mkdtemp(prefix="embeval-sandbox-")
    t0 = time.monotonic()
    try:
        job = {"code": code, "entry": entry, "inputs": [list(a) for a in inputs], "allowed": list(allowed_modules),
               "guard": guard, "announce": announce, "drop_uid": drop, "nproc": limits.max_processes + 1}
        Path(tmp, "job.json").write_text(json.dumps(job))
        Path(tmp, "runner.py").write_text(_RUNNER)
        if drop is not None:
            os.chown(tmp, NOBODY, NOBODY)
            for f in ("job.json", "runner.py"):
                os.chown(Path(tmp, f), NOBODY, NOBODY)
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "runner.py"],
            cwd=tmp, env=scrubbed_env(tmp), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=_preexec(limits, network_namespace, 0 if as_root else _user_process_count(), as_root),
            close_fds=True)
        res = _serve(proc, limits, rpc or {}, t0)
        res.isolation = {"network_namespace": network_namespace, "uid": drop if drop is not None else os.getuid(),
                         "guard": guard, "limits": asdict(limits)}
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _serve(proc: subprocess.Popen, limits: SandboxLimits, rpc: Mapping[str, Callable[..., Any]], t0: float) -> SandboxResult:
    out_buf, err_buf = b"", b""
    result: dict[str, Any] | None = None
    killed = None
    deadline = t0 + limits.wall_seconds
    fds = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err"}
    try:
        while fds:
            left = deadline - time.monotonic()
            if left <= 0:
                killed = "wall-clock"
                break
            ready, _, _ = select.select(list(fds), [], [], min(left, 0.5))
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    fds.pop(fd)
                    continue
                if fds[fd] == "err":
                    err_buf = (err_buf + chunk)[-65536:]
                    continue
                out_buf += chunk
                if len(out_buf) > limits.max_output_bytes:
                    killed = "output limit"
                    break
                while b"\n" in out_buf:
                    line, out_buf = out_buf.split(b"\n", 1)
                    try:
                        msg = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if "result" in msg:
                        result = msg["result"]
                    elif "rpc" in msg:
                        _answer(proc, rpc, msg)
            if killed:
                break
            if result is not None:
                break
    finally:
        _kill_group(proc)
    rc = proc.wait()
    stderr = err_buf.decode(errors="replace")
    if killed is None and result is None:
        if rc == -signal.SIGXCPU or rc == -signal.SIGKILL and "cpu" in stderr.lower():
            killed = "cpu"
        elif "MemoryError" in stderr:
            killed = "memory"
        elif rc is not None and rc < 0:
            killed = f"signal {-rc}"
    res = SandboxResult(ok=result is not None and killed is None, killed=killed, returncode=rc, stderr=stderr[-4000:],
                        seconds=time.monotonic() - t0)
    if result is not None:
        res.outputs, res.errors, res.load_error = result["outputs"], result["errors"], result["load_error"]
    return res


def _answer(proc: subprocess.Popen, rpc: Mapping[str, Callable[..., Any]], msg: dict[str, Any]) -> None:
    kind = msg.pop("rpc")
    handler = rpc.get(kind)
    try:
        if handler is None:
            raise KeyError(f"no handler for {kind!r}")
        rep = {"result": handler(**msg)}
    except Exception as exc:  # the sandboxed code sees the error text, the parent goes on
        rep = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        proc.stdin.write((json.dumps(rep) + "\n").encode())
        proc.stdin.flush()
    except (BrokenPipeError, OSError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the sandbox's process group (the runner and everything it forked)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            f.close()
        except OSError:
            pass
