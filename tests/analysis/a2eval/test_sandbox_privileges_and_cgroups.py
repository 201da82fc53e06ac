"""Hostile code against the A2Eval sandbox, round 3: the job must never be host root,
must not reach kernel-wide settings, must not hold memory the limits do not see, and must not be
able to forge a result the parent accepts.

Kernel settings are probed by opening for writing, never by writing. Each test checks the host
from outside the sandbox (process credentials, cgroups, sysctl values), not only what the job says."""
from __future__ import annotations

import glob
import os
import time
from pathlib import Path

import numpy as np
import pytest

from embeval_analysis.a2eval import sandbox as S
from embeval_analysis.a2eval.eval_agent import SynthesisResult, evaluate
from embeval_analysis.a2eval.procedural import procedural_pool
from embeval_analysis.a2eval.sandbox import SandboxLimits, run_sandboxed

L = SandboxLimits(cpu_seconds=4, wall_seconds=8, memory_bytes=1 << 30)
PROTO = "import sys, json, os\nPROTO = json.loads(sys.argv[1])['proto_fd']\n"
ROOT = os.geteuid() == 0

#: host-wide kernel settings the round-3 attacker opened for writing from inside the job
SYSCTLS = ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sys/kernel/panic",
           "/proc/sys/vm/overcommit_memory", "/proc/sys/fs/file-max", "/proc/sys/kernel/randomize_va_space",
           "/proc/sysrq-trigger"]


#: job code: open_for_write(paths) -> {path: "OPENED" or the errno name}, probing without writing
OPEN_FOR_WRITE = ("import os, errno\ndef open_for_write(paths):\n    out = {}\n    for p in paths:\n        try:\n"
                  "            os.close(os.open(p, os.O_WRONLY))\n            out[p] = 'OPENED'\n"
                  "        except OSError as e:\n            out[p] = errno.errorcode[e.errno]\n    return out\n")


def run(code, **kw):
    return run_sandboxed(code, "f", kw.pop("inputs", [[1]]), kw.pop("limits", L), **kw)


def test_the_job_is_never_host_root():
    """The round-3 finding: run by root, the job's uid 65534 was host uid 0 (uid_map '65534 0 1').
    Now the host sees the job process as an unprivileged uid with no capabilities."""
    seen: dict = {}
    # the job waits in a model call while the host looks at it from outside
    code = "import os\ndef f(x):\n    return [os.getresuid(), open('/proc/self/uid_map').read().split(), generate('look')]\n"
    r = run(code, rpc={"generate": lambda **kw: look_runner(seen)})
    assert r.ok and not r.load_error, r.first_error()
    uids, uid_map, looked = r.outputs[0]
    assert looked == "seen" and uids == [65534, 65534, 65534]
    rows = [uid_map[i:i + 3] for i in range(0, len(uid_map), 3)]
    host_uid_of_job = next(int(h) for inside, h, n in rows if int(inside) <= 65534 < int(inside) + int(n))
    assert host_uid_of_job != 0
    assert host_uid_of_job == (S.SANDBOX_HOST_UID if ROOT else os.getuid())
    # from outside: the job's real, effective, saved and file-system uids and its capabilities
    status = seen["status"]
    uid_line = next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1:]
    assert [int(u) for u in uid_line] == [host_uid_of_job] * 4
    for cap in ("CapPrm", "CapEff", "CapAmb"):
        assert int(next(ln for ln in status.splitlines() if ln.startswith(cap)).split()[1], 16) == 0
    assert r.isolation["host_uid"] == host_uid_of_job


def look_runner(seen: dict) -> str:
    """Find the sandboxed runner (the interpreter started with the sandbox's config, whose host uid is
    not this process's) and record how the host sees it."""
    me = os.getpid()
    for d in glob.glob("/proc/[0-9]*"):
        try:
            cmd = Path(d, "cmdline").read_bytes()
            if b'"proto_fd"' in cmd and b"bwrap" not in cmd.split(b"\0")[0] and int(Path(d).name) != me:
                st = Path(d, "status").read_text()
                ppid_chain_ok = "NSpid:" in st and len(next(ln for ln in st.splitlines() if ln.startswith("NSpid:")).split()) > 2
                if ppid_chain_ok:  # a process inside a PID namespace: the job, not the bench baseline
                    seen.update({"status": st, "cgroup": Path(d, "cgroup").read_text()})
                    return "seen"
        except (OSError, StopIteration):
            pass
    return "not seen"


def test_kernel_wide_settings_cannot_be_opened_for_writing():
    before = {p: Path(p).read_text() for p in SYSCTLS if p.startswith("/proc/sys") and os.access(p, os.R_OK)}
    code = OPEN_FOR_WRITE + "def f(paths):\n    out = open_for_write(paths)\n    out['listing'] = sorted(os.listdir('/proc/sys'))\n    return out\n"
    r = run(code, inputs=[[SYSCTLS]])
    assert r.ok and not r.load_error, r.first_error()
    out = r.outputs[0]
    assert out.pop("listing") == []  # /proc/sys is an empty read-only folder inside
    assert all(v != "OPENED" for v in out.values()), out
    assert set(out.values()) <= {"ENOENT", "EACCES", "EROFS", "EPERM"}, out
    assert {p: Path(p).read_text() for p in before} == before


def test_dev_and_dev_shm_are_read_only_and_tmp_is_capped():
    """The round-3 attacker wrote 160 MiB to /dev and /dev/shm (uncapped tmpfs); /tmp stopped at 16 MiB."""
    code = ("import os\ndef f(x):\n    out = {}\n    for p in ('/dev/shm/fill', '/dev/fill', '/tmp/fill'):\n"
            "        n = 0\n        try:\n            with open(p, 'wb') as fh:\n                for _ in range(64):\n"
            "                    fh.write(b'x' * (1 << 20)); fh.flush(); n += 1\n"
            "        except OSError as e:\n            out[p] = [n, e.strerror]\n        else:\n            out[p] = [n, None]\n"
            "        try:\n            os.remove(p)\n        except OSError:\n            pass\n    return out\n")
    lim = SandboxLimits(cpu_seconds=4, wall_seconds=8, file_size_bytes=64 << 20, tmpfs_bytes=16 << 20)
    r = run(code, limits=lim)
    assert r.ok and not r.load_error, r.first_error()
    out = r.outputs[0]
    assert out["/dev/shm/fill"] == [0, "Read-only file system"]
    assert out["/dev/fill"] == [0, "Read-only file system"]
    assert out["/tmp/fill"][0] <= 16 and out["/tmp/fill"][1] == "No space left on device"


def test_shared_memory_that_rlimit_as_does_not_see_is_refused():
    """SysV shm took 512 MiB with RLIMIT_AS at 256 MiB; memfd and POSIX shm are the same kind of memory."""
    code = ("import ctypes, os, errno\ndef f(x):\n    libc = ctypes.CDLL(None, use_errno=True)\n    out = {}\n"
            "    out['shmget'] = [libc.shmget(0, 512 << 20, 0o1000 | 0o600), errno.errorcode.get(ctypes.get_errno())]\n"
            "    out['semget'] = [libc.semget(0, 1, 0o1000 | 0o600), errno.errorcode.get(ctypes.get_errno())]\n"
            "    out['msgget'] = [libc.msgget(0, 0o1000 | 0o600), errno.errorcode.get(ctypes.get_errno())]\n"
            "    try:\n        os.memfd_create('x')\n        out['memfd'] = 'created'\n"
            "    except OSError as e:\n        out['memfd'] = errno.errorcode[e.errno]\n"
            "    try:\n        from multiprocessing import shared_memory\n"
            "        shared_memory.SharedMemory(create=True, size=64 << 20)\n        out['posix_shm'] = 'created'\n"
            "    except Exception as e:\n        out['posix_shm'] = type(e).__name__\n    return out\n")
    r = run(code, limits=SandboxLimits(cpu_seconds=4, wall_seconds=8, memory_bytes=256 << 20))
    assert r.ok and not r.load_error, r.first_error()
    out = r.outputs[0]
    assert out["shmget"] == [-1, "EPERM"] and out["semget"] == [-1, "EPERM"] and out["msgget"] == [-1, "EPERM"]
    assert out["memfd"] == "EPERM"
    assert out["posix_shm"] != "created"


@pytest.mark.skipif(S.cgroup_support()["version"] == "none",
                    reason=f"no cgroup for the sandbox here: {S.cgroup_support()['reason']}")
def test_the_job_runs_in_its_own_cgroup_with_memory_and_process_caps():
    seen: dict = {}
    lim = SandboxLimits(cpu_seconds=6, wall_seconds=12, max_processes=24)
    code = ("import threading, time\ndef f(x):\n    looked = generate('look')\n    n = 0\n    try:\n"
            "        for _ in range(200):\n            threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
            "            n += 1\n    except RuntimeError:\n        pass\n    return [looked, n]\n")
    r = run(code, limits=lim, rpc={"generate": lambda **kw: look_runner(seen)})
    assert r.ok and not r.load_error, r.first_error()
    looked, threads = r.outputs[0]
    assert looked == "seen"
    assert r.isolation["cgroup"]["version"] in ("v1", "v2")
    assert r.isolation["cgroup"]["pids_max"] == 24 and r.isolation["cgroup"]["memory_bytes"] == lim.cgroup_memory()
    assert "embeval-sandbox-" in seen["cgroup"]
    assert 10 <= threads < 24  # the runner is one task of the 24; the 200 threads stop at the cap
    # removed after the run
    for parent in S.cgroup_support()["parents"]:
        assert not glob.glob(os.path.join(parent, f"embeval-sandbox-{os.getpid()}-*"))


@pytest.mark.skipif(S.cgroup_support()["version"] == "none",
                    reason=f"no cgroup for the sandbox here: {S.cgroup_support()['reason']}")
def test_memory_past_the_cgroup_cap_kills_the_job_and_says_so():
    """/tmp pages and heap together: the cap counts what RLIMIT_AS alone does not (tmpfs pages)."""
    lim = SandboxLimits(cpu_seconds=6, wall_seconds=12, memory_bytes=512 << 20, tmpfs_bytes=64 << 20,
                        file_size_bytes=64 << 20, cgroup_memory_bytes=96 << 20)
    code = ("def f(x):\n    with open('/tmp/a', 'wb') as fh:\n        fh.write(b'x' * (60 << 20))\n"
            "    keep = [bytearray(1 << 20) for _ in range(200)]\n    for b in keep:\n        b[::4096] = b'y' * 256\n"
            "    return len(keep)\n")
    r = run(code, limits=lim)
    assert not r.ok and r.outputs == []
    assert r.killed == f"memory (cgroup limit {96 << 20} bytes)", (r.killed, r.stderr[-300:])


# ------------------------------------------------------------------ the protocol is never trusted

def forged(result: str) -> str:
    return PROTO + "def f(x):\n    os.write(PROTO, (json.dumps({'result': " + result + "}) + '\\n').encode())\n    os._exit(0)\n"


def test_a_load_error_with_outputs_is_not_ok():
    """Round 3: load_error set skipped the count and value checks: ok=True with 5 outputs
    [inf, -inf, 1e300, 7, 'x'] for 2 inputs."""
    r = run(forged("{'outputs': [float('inf'), -float('inf'), 1e300, 7, 'x'], 'errors': [None] * 5, "
                   "'load_error': 'SyntaxError: nothing'}"), inputs=[[1], [2]])
    assert not r.ok and r.outputs == [] and r.valid_outputs() == []
    assert r.killed.startswith("protocol: 5 outputs beside a load error")


def test_an_output_next_to_its_own_error_is_not_ok():
    r = run(forged("{'outputs': [1.0, 0.5], 'errors': ['ValueError: x', None], 'load_error': None}"),
            inputs=[[1], [2]], check=S.score_check())
    assert not r.ok and r.outputs == [] and r.killed.startswith("protocol: input 0 has both")


def test_errors_of_the_wrong_count_are_not_ok():
    r = run(forged("{'outputs': [1.0], 'errors': [], 'load_error': None}"))
    assert not r.ok and r.killed.startswith("protocol")


def test_valid_outputs_keep_only_checked_values():
    r = run("def f(x):\n    if x == 2:\n        raise ValueError('no')\n    return [0.5, 7][x - 1] if x < 3 else 1.0\n",
            inputs=[[1], [2], [3], [4]], check=S.score_check())
    assert r.ok
    # input 2 raised, input 4's 1.0 passes; input 1's 0.5 passes; the check rejected nothing else
    assert r.valid_outputs() == [0.5, None, 1.0, 1.0]
    r = run("def f(x):\n    return 7\n", inputs=[[1]], check=S.score_check())
    assert r.valid_outputs() == [None] and r.errors[0].startswith("output rejected")


def test_evaluate_uses_only_validated_results():
    """eval_agent.evaluate() read outputs without checking ok or errors: a scorer that forges a
    result (load error + scores) must leave every synthesised score NaN, and an inference job that
    fails one item must leave that prediction None."""
    items = [it for it in procedural_pool(n_items=60, seed=0) if it.answer_type == "mc"][:3]

    class Subject:
        id = "stub"

        def generate(self, images, prompt):
            return "A"

    bad_item = items[1].id
    inference = ("def run_vlm_inference(doc):\n    if doc['id'] == " + repr(bad_item) + ":\n"
                 "        raise ValueError('fails on purpose')\n    return generate('which?', doc['image_ids'])\n")
    scorer = forged("{'outputs': [1.0, 1.0, 1.0, 1.0], 'errors': [None] * 4, 'load_error': 'NameError: x'}"
                    ).replace("def f(x):", "def eval_score(doc, prediction):")
    synth = SynthesisResult(inference_code={"mc": inference}, scorer_code={"mc": scorer})
    res = evaluate(synth, [Subject()], items, SandboxLimits(cpu_seconds=4, wall_seconds=8))
    assert res.predictions[0][1] is None and res.predictions[0][0] == "A" and res.predictions[0][2] == "A"
    assert np.isnan(res.synth_scores).all()
    assert np.isnan(res.ref_scores[0, 1]) and np.isfinite(res.ref_scores[0, [0, 2]]).all()


# ------------------------------------------------------------------ round 3, red team (a helper attacking the above)

def test_syscalls_reaching_machine_wide_state_are_refused():
    """AIO contexts (fs.aio-max-nr is host-wide: one io_setup took all of it), fanotify, sync, vsock and
    netlink sockets (not covered by the network namespace), and disarming the parent-death signal."""
    code = ("import ctypes, socket, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "def call(*a):\n    r = libc.syscall(*a)\n    return [r, errno.errorcode.get(ctypes.get_errno()) if r < 0 else None]\n"
            "def sock(fam, kind=socket.SOCK_STREAM):\n    try:\n        socket.socket(fam, kind).close()\n        return 'ok'\n"
            "    except OSError as e:\n        return errno.errorcode[e.errno]\n"
            "def f(x):\n    ctx = ctypes.c_ulong(0)\n    sig = ctypes.c_int(-1)\n"
            "    out = {'io_setup': call(206, 1 << 16, ctypes.byref(ctx)), 'fanotify_init': call(300, 0x200, 0),\n"
            "           'sync': call(162), 'vsock': sock(40), 'netlink': sock(16, socket.SOCK_RAW),\n"
            "           'unix': sock(socket.AF_UNIX), 'inet': sock(socket.AF_INET),\n"
            "           'disarm_pdeathsig': [libc.prctl(1, 0, 0, 0, 0), errno.errorcode.get(ctypes.get_errno())],\n"
            "           'set_other_pdeathsig': libc.prctl(1, 15, 0, 0, 0)}\n"
            "    libc.prctl(2, ctypes.byref(sig), 0, 0, 0)\n    out['pdeathsig'] = sig.value\n"
            "    out['pair'] = len(socket.socketpair())\n    return out\n")
    r = run(code)
    assert r.ok and not r.load_error, r.first_error()
    out = r.outputs[0]
    if os.uname().machine != "x86_64":
        pytest.skip("the raw syscall numbers above are x86_64's")
    assert out["io_setup"] == [-1, "EPERM"] and out["fanotify_init"] == [-1, "EPERM"] and out["sync"] == [-1, "EPERM"]
    assert out["vsock"] == "EAFNOSUPPORT" and out["netlink"] == "EAFNOSUPPORT"
    assert out["unix"] == "ok" and out["inet"] == "ok" and out["pair"] == 2
    assert out["disarm_pdeathsig"] == [-1, "EPERM"] and out["set_other_pdeathsig"] == -1
    assert out["pdeathsig"] == (9 if ROOT else out["pdeathsig"])  # armed again after the uid drop


def test_more_machine_wide_proc_files_are_covered():
    code = OPEN_FOR_WRITE + ("def f(x):\n    out = open_for_write(['/proc/pressure/memory', '/proc/cmdline'])\n"
                             "    try:\n        out['cmdline'] = open('/proc/cmdline').read()\n    except OSError as e:\n"
                             "        out['cmdline'] = e.strerror\n    return out\n")
    r = run(code)
    assert r.ok and not r.load_error, r.first_error()
    out = r.outputs[0]
    assert "OPENED" not in out.values()
    host = Path("/proc/cmdline").read_text().strip()
    assert out["cmdline"] in ("", "Permission denied") and (not host or host not in out["cmdline"])


def test_lone_surrogates_are_not_valid_outputs():
    r = run("def f(x):\n    return ['ok', {'\\ud800': 1}, '\\udfff'][x]\n", inputs=[[0], [1], [2]], check=S.text_check)
    assert r.ok
    assert r.valid_outputs() == ["ok", None, None]
    assert all("not valid Unicode" in e for e in r.errors[1:])


def _cgroup_folders(pid: int) -> list[str]:
    return [g for parent in S.cgroup_support()["parents"] for g in glob.glob(os.path.join(parent, f"embeval-sandbox-{pid}-*"))]


@pytest.mark.skipif(S.cgroup_support()["version"] == "none",
                    reason=f"no cgroup for the sandbox here: {S.cgroup_support()['reason']}")
def test_a_stale_cgroup_folder_never_leaves_a_job_uncapped():
    """A folder left by a killed embeval process whose pid is reused by this one used to make mkdir
    fail, and the job then ran with no cgroup at all."""
    stale = [os.path.join(parent, f"embeval-sandbox-{os.getpid()}-0") for parent in S.cgroup_support()["parents"]]
    for p in stale:
        os.makedirs(p, exist_ok=True)
    try:
        r = run("def f(x):\n    return 1\n")
        assert r.ok and r.isolation["cgroup"]["version"] in ("v1", "v2")
    finally:
        for p in stale:
            os.rmdir(p)


@pytest.mark.skipif(not ROOT, reason="the parent-death signal is cleared by the uid drop only when root starts the job")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_the_job_dies_with_a_terminated_parent_and_its_cgroup_is_swept(how):
    """Red team: the uid drop cleared the parent-death signal, so a job outlived a parent killed by a CI
    timeout (SIGTERM) and ran on with no wall clock; its cgroup folders stayed behind."""
    import signal
    import subprocess
    import sys

    script = ("from embeval_analysis.a2eval.sandbox import run_sandboxed, SandboxLimits\n"
              "run_sandboxed('import time\\ndef f(x):\\n    while True:\\n        time.sleep(0.05)\\n', 'f', [[1]], "
              "SandboxLimits(cpu_seconds=60, wall_seconds=60))\n")
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        t0 = time.monotonic()
        job = lambda: [d for d in glob.glob("/proc/[0-9]*") if _is_job_of(d, parent.pid)]  # noqa: E731
        while not job() and time.monotonic() - t0 < 20:
            time.sleep(0.05)
        assert job(), "the job never started"
        parent.send_signal(getattr(signal, how))
        parent.wait()
        t0 = time.monotonic()
        while job() and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert job() == []
        if S.cgroup_support()["version"] != "none":
            S._sweep_stale_cgroups.cache_clear()
            run("def f(x):\n    return 1\n")  # the next run in any process sweeps what the dead parent left
            assert _cgroup_folders(parent.pid) == []
    finally:
        parent.kill()
        parent.wait()


def _is_job_of(proc_dir: str, parent_pid: int) -> bool:
    """Whether /proc/PID is the sandboxed runner started (through bwrap) by ``parent_pid``."""
    try:
        if b'"proto_fd"' not in Path(proc_dir, "cmdline").read_bytes():
            return False
        st = Path(proc_dir, "status").read_text()
        if not st.startswith("Name:\tpython"):
            return False  # bwrap's own set-up child before it runs the runner
        if len(next(ln for ln in st.splitlines() if ln.startswith("NSpid:")).split()) <= 2:
            return False  # not in a PID namespace: bwrap itself
        bwrap = int(next(ln for ln in st.splitlines() if ln.startswith("PPid:")).split()[1])
        if bwrap in (0, 1):
            return True  # orphaned: its bwrap (and our parent) are gone
        ppid = int(next(ln for ln in Path(f"/proc/{bwrap}/status").read_text().splitlines() if ln.startswith("PPid:")).split()[1])
        return ppid == parent_pid
    except (OSError, StopIteration, ValueError):
        return False
