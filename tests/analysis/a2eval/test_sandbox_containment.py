"""Hostile code against the A2Eval sandbox: every attack of the first hostile round must be contained.

Each test runs the attack for real and checks the host afterwards (files, processes, sockets),
not only what the sandbox reports. Wall limits are short so the suite stays fast."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from embeval_analysis.a2eval import sandbox as S
from embeval_analysis.a2eval.eval_agent import GOLD_FIELDS, item_doc, run_inference, run_scorer
from embeval_analysis.a2eval.procedural import procedural_pool
from embeval_analysis.a2eval.sandbox import SandboxLimits, run_sandboxed

L = SandboxLimits(cpu_seconds=3, wall_seconds=4, memory_bytes=1 << 30)
#: s a contained run may take past its wall limit (kill, reap, bwrap teardown) on a loaded 2-core CI machine
KILL_SLACK = 5
# the protocol descriptor's number, as hostile code finds it (the runner's argv)
PROTO = "import sys, json, os\nPROTO = json.loads(sys.argv[1])['proto_fd']\n"


def run(code, **kw):
    return run_sandboxed(code, "f", kw.pop("inputs", [[1]]), kw.pop("limits", L), **kw)


def attempts(*lines: str) -> str:
    """Code whose f() tries each statement and returns, per statement, 'ok' or the exception's name."""
    body = "\n".join(f"    try:\n        {ln}\n        out.append('ok')\n    except BaseException as e:\n"
                     f"        out.append(type(e).__name__ + ': ' + str(e))" for ln in lines)
    return "import os, sys, json, ctypes, signal\ndef f(x):\n    out = []\n" + body + "\n    return out\n"


def marker_processes(marker: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def _last_arg(pid: int) -> bytes:
    """The last argument of process ``pid``'s command line (b"" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").rsplit(b"\0", 1)[-1]
    except OSError:
        return b""


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ------------------------------------------------------------------ tampering with the runner

def test_guard_tampering_through_main_module_gains_nothing(tmp_path):
    """Rewriting the runner's globals via sys.modules['__main__'] (what switched the old audit hook
    off) changes nothing: there is no guard in the process. Fork, setsid+fork, ctypes unshare/mount,
    raising an rlimit, signalling PID 1 and writing to the host all fail; a runner broken this way
    is simply not ok."""
    target = tmp_path / "pwned"
    keep = ("json", "os", "sys", "traceback", "resource", "PROTO", "inp", "_send", "_rpc", "job", "out", "fn", "ns",
            "k", "args", "r", "e", "tb", "where", "generate")
    code = ("import sys\nm = sys.modules['__main__']\nfor k in list(vars(m)):\n"
            f"    if not k.startswith('__') and k not in {keep!r}:\n"
            "        setattr(m, k, None)\n" + attempts(
                "os.fork()", "os.setsid(); os.fork()",
                "assert ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0, ctypes.get_errno()",
                "assert ctypes.CDLL(None, use_errno=True).mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0",
                "import resource; resource.setrlimit(resource.RLIMIT_CPU, (10**6, 10**6))",
                f"open({str(target)!r}, 'w').write('x')", "os.kill(1, signal.SIGKILL)"))
    r = run(code)
    assert r.ok, r.first_error()
    got = r.outputs[0]
    assert got[0].startswith("PermissionError") and got[1].startswith("PermissionError"), got
    assert got[2].startswith("AssertionError") and got[3].startswith("AssertionError"), got
    assert got[4].startswith("ValueError"), got
    assert got[5].startswith(("FileNotFoundError", "OSError", "PermissionError")), got
    assert not target.exists()
    r = run("import sys\nvars(sys.modules['__main__']).clear()\ndef f(x):\n    return 1\n")
    assert not r.ok and r.outputs == []


def test_double_fork_survivor_dies_with_the_job():
    """With process creation allowed (seccomp relaxed), a setsid'ed double-forked grandchild that is
    alive when f() returns is gone when run_sandboxed returns: the PID namespace takes it down."""
    marker = f"embeval-survivor-{uuid.uuid4().hex}"
    code = (
        "import os, sys, time\ndef f(x):\n    r, w = os.pipe()\n    pid = os.fork()\n    if pid == 0:\n"
        "        os.setsid()\n        if os.fork() == 0:\n"
        "            os.execv(sys.executable, [sys.executable, '-c', 'import time\\nwhile True: time.sleep(0.05)', "
        f"{marker!r}])\n"
        "        os._exit(0)\n    os.waitpid(pid, 0)\n    for _ in range(300):\n"
        "        alive = [p for p in os.listdir('/proc') if p.isdigit() and "
        f"{marker!r}.encode() in open(f'/proc/{{p}}/cmdline', 'rb').read()]\n"
        "        if alive:\n            return 'alive'\n        time.sleep(0.02)\n    return 'never started'\n")
    r = run(code, allow_fork=True, limits=SandboxLimits(cpu_seconds=3, wall_seconds=10))
    assert r.ok and r.outputs == ["alive"], r.first_error()
    assert marker_processes(marker) == []
    # the same program under the default filter cannot fork at all
    r = run(code)
    assert r.ok and r.outputs == [None] and "PermissionError" in r.errors[0]


def test_survivor_of_a_killed_job_dies_too():
    marker = f"embeval-killed-{uuid.uuid4().hex}"
    code = ("import os, sys, time\ndef f(x):\n    if os.fork() == 0:\n        os.setsid()\n"
            "        os.execv(sys.executable, [sys.executable, '-c', 'import time\\nwhile True: time.sleep(0.05)', "
            f"{marker!r}])\n    time.sleep(60)\n")
    r = run(code, allow_fork=True, limits=SandboxLimits(wall_seconds=1.5))
    assert not r.ok and r.killed == "wall-clock"
    assert marker_processes(marker) == []


def test_cross_run_tampering_leaves_other_runs_untouched():
    """A hostile job that spends its whole life trying to reach other runs (their processes, stdin,
    files) while honest runs go on: every honest run returns its own answer."""
    hostile = ("import os, glob, time\ndef f(x):\n    t0 = time.time()\n    while time.time() - t0 < 3:\n"
               "        for p in glob.glob('/proc/[0-9]*'):\n            for fd in ('0', '1', '2'):\n"
               "                try:\n                    open(f'{p}/fd/{fd}', 'w').write('{\"result\": 1}\\n')\n"
               "                except OSError:\n                    pass\n"
               "        for p in glob.glob('/tmp/*') + glob.glob('/tmp/embeval-sandbox-*/job.json'):\n"
               "            try:\n                open(p, 'w').write('def g(x): return 666')\n"
               "            except OSError:\n                pass\n"
               "        for pid in range(2, 200):\n            try:\n                os.kill(pid, 9)\n"
               "            except OSError:\n                pass\n")
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("h", run(hostile, allow_fork=True)))
    th.start()
    time.sleep(0.3)
    honest = [run(f"def f(x):\n    return x * {k}", inputs=[[7]]) for k in range(5)]
    th.join()
    assert [h.outputs for h in honest] == [[7 * k] for k in range(5)] and all(h.ok for h in honest)
    assert out["h"].ok or out["h"].killed


# ------------------------------------------------------------------ the file system

def test_writes_outside_the_sandbox_fail_by_every_route(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    stdlib_os = Path(os.__file__).resolve()
    before = hashlib.sha256(stdlib_os.read_bytes()).hexdigest()
    d, v = str(tmp_path), str(victim)
    code = attempts(
        f"fd = os.open('/', os.O_RDONLY | os.O_DIRECTORY); os.close(os.open({d[1:]!r} + '/dirfd', "
        "os.O_WRONLY | os.O_CREAT, dir_fd=fd))",
        f"fd = os.open('/tmp', os.O_RDONLY); open('/tmp/a', 'w').close(); os.rename('a', {d!r} + '/renamed', "
        "src_dir_fd=fd, dst_dir_fd=fd)",
        f"os.mkfifo({d!r} + '/fifo')",
        f"os.symlink({v!r}, '/tmp/link'); open('/tmp/link', 'w').write('pwned')",
        f"open('../../../../../..' + {d!r} + '/dotdot', 'w').write('x')",
        f"open({v!r}, 'w').write('pwned')",
        f"open({str(stdlib_os)!r}, 'a').write('pwned')",
        f"os.rename({str(stdlib_os)!r}, '/tmp/os.py')",
        "open('/etc/passwd', 'w').write('x')",
        "open('/new-file-in-root', 'w').write('x')",
    )
    r = run(code)
    assert r.ok, r.first_error()
    # (the symlink itself is created inside the private /tmp, but writing through it reaches nothing)
    assert [o == "ok" for o in r.outputs[0]] == [False] * 10, r.outputs[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"] and victim.read_text() == "original"
    assert hashlib.sha256(stdlib_os.read_bytes()).hexdigest() == before
    assert not Path("/new-file-in-root").exists()


def test_the_view_holds_only_the_runtime_and_allowed_packages(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    code = ("import os\ndef f(x):\n    seen = []\n    for top in os.listdir('/'):\n"
            "        if top in ('proc', 'dev'):\n            continue\n"
            "        for root, dirs, files in os.walk('/' + top):\n            seen += [os.path.join(root, n) for n in files]\n"
            f"    return [seen, os.path.exists({str(secret)!r})]\n")
    r = run(code)
    assert r.ok, r.first_error()
    seen, exists = r.outputs[0]
    view = S.sandbox_view(S.ALLOWED_MODULES)
    allowed = [dst for _, dst in view.binds] + [link for _, link in view.symlinks]
    outside = [p for p in seen if not any(p == a or p.startswith(a.rstrip("/") + "/") for a in allowed)]
    assert not exists and len(seen) > 500 and outside == []
    assert any("/numpy/" in p for p in seen) and not any("/torch/" in p or "/scipy/" in p for p in seen)
    assert not any(p.startswith(view.hide) for p in seen)  # the interpreter's own site-packages is hidden


def test_proc_of_the_parent_is_not_readable(monkeypatch):
    monkeypatch.setenv("A2EVAL_PARENT_SECRET", "s3cr3t-" + uuid.uuid4().hex)
    secret = os.environ["A2EVAL_PARENT_SECRET"]
    me = os.getpid()
    code = ("import os, glob\ndef f(me):\n    got = {}\n"
            "    for p in glob.glob('/proc/[0-9]*') + [f'//proc/{me}', f'/proc/{me}', '/proc/self/../1']:\n"
            "        for n in ('cmdline', 'environ'):\n            try:\n"
            "                got[p + '/' + n] = open(p + '/' + n, 'rb').read().decode(errors='replace')\n"
            "            except OSError as e:\n                got[p + '/' + n] = type(e).__name__\n    return got\n")
    r = run(code, inputs=[[me]])
    assert r.ok, r.first_error()
    blob = json.dumps(r.outputs[0])
    assert secret not in blob and "pytest" not in blob
    assert r.outputs[0][f"/proc/{me}/cmdline"] == "FileNotFoundError" or me <= 3


def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("A2EVAL_TEST_SECRET", "hunter2")
    # /proc/PID/environ may also be unreadable: a job that root started dropped its uid, which makes it
    # non-dumpable (its /proc files belong to root); readable or not, no secret is in it
    r = run("import os\ndef read(p):\n    try:\n        return open(p).read()\n    except OSError as e:\n"
            "        return type(e).__name__\ndef f(x):\n    return [dict(os.environ), read('/proc/self/environ'), "
            "read('/proc/1/environ')]")
    assert r.ok and "hunter2" not in json.dumps(r.outputs) and "A2EVAL_TEST_SECRET" not in json.dumps(r.outputs)
    assert set(r.outputs[0][0]) <= set(S.scrubbed_env()) | {"PWD"}
    if os.geteuid() != 0:
        assert "HOME=/tmp" in r.outputs[0][1]


# ------------------------------------------------------------------ network

def test_no_network_tcp_or_unix(tmp_path):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    upath = str(tmp_path / "u.sock")
    usrv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    usrv.bind(upath)
    usrv.listen(4)
    abstract = "\0embeval-test-" + uuid.uuid4().hex
    asrv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    asrv.bind(abstract)
    asrv.listen(4)
    try:
        code = attempts(
            f"s = __import__('socket').create_connection(('127.0.0.1', {port}), timeout=1); s.sendall(b'hi')",
            "__import__('socket').create_connection(('93.184.216.34', 80), timeout=1)",
            "__import__('socket').create_connection(('::1', 22), timeout=1)",
            f"s = __import__('socket').socket(1, 1); s.connect({upath!r})",
            f"s = __import__('socket').socket(1, 1); s.connect({abstract!r})",
            "s = __import__('socket').socket(2, 2); s.sendto(b'x', ('127.0.0.1', 53)); s.settimeout(0.5); s.recv(1)",
        )
        r = run(code)
        assert r.ok, r.first_error()
        assert all(not o.startswith("ok") for o in r.outputs[0]), r.outputs[0]
        for s in (srv, usrv, asrv):
            s.settimeout(0.2)
            with pytest.raises((TimeoutError, socket.timeout)):
                s.accept()
    finally:
        srv.close(), usrv.close(), asrv.close()


# ------------------------------------------------------------------ resources

def test_fork_bomb_is_refused():
    t0 = time.monotonic()
    r = run("import os\ndef f(x):\n    n = 0\n    while True:\n        os.fork()\n        n += 1")
    assert time.monotonic() - t0 < L.wall_seconds + KILL_SLACK
    assert r.ok and r.outputs == [None] and "PermissionError" in r.errors[0]
    r = run("import subprocess\ndef f(x):\n    return subprocess.run(['/bin/true']).returncode")
    assert r.ok and r.outputs == [None] and ("PermissionError" in r.errors[0] or "FileNotFoundError" in r.errors[0])


def test_thread_bomb_is_contained():
    t0 = time.monotonic()
    r = run("import threading, time\ndef f(x):\n    n = 0\n    while True:\n"
            "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n        n += 1")
    assert time.monotonic() - t0 < L.wall_seconds + KILL_SLACK
    assert not (r.ok and r.errors == [None])
    assert r.killed or "can't start new thread" in r.errors[0] or "MemoryError" in r.errors[0], r.first_error()


def test_memory_bomb_is_contained():
    lim = SandboxLimits(cpu_seconds=3, wall_seconds=8, memory_bytes=256 << 20)
    r = run("def f(x):\n    a = [bytearray(1 << 24) for _ in range(1000)]\n    return len(a)", limits=lim)
    assert (r.ok and "MemoryError" in r.errors[0]) or r.killed, r.first_error()
    r = run("def f(x):\n    return len(bytearray(300 << 20))", limits=lim)
    assert r.ok and r.outputs == [None] and "MemoryError" in r.errors[0]


@pytest.mark.parametrize("where", ["stdout", "stderr", "proto", "proto-lines"])
def test_output_floods_are_cut(where):
    lim = SandboxLimits(cpu_seconds=3, wall_seconds=4, max_output_bytes=1 << 20)
    body = {"stdout": "sys.stdout.write('x' * 65536)", "stderr": "sys.stderr.write('x' * 65536)",
            "proto": "os.write(PROTO, b'x' * 65536)", "proto-lines": "os.write(PROTO, b'{\"a\": 1}\\n' * 4096)"}[where]
    fds = open_fds()
    t0 = time.monotonic()
    r = run(PROTO + f"def f(x):\n    while True:\n        {body}\n", limits=lim)
    assert time.monotonic() - t0 < lim.wall_seconds + KILL_SLACK
    assert not r.ok and r.outputs == [] and r.killed
    assert r.killed == "output limit" if where in ("stdout", "stderr", "proto") else r.killed.startswith("protocol")
    assert len(r.stdout) <= 4000 and len(r.stderr) <= 4000
    assert open_fds() == fds


def test_rpc_flood_does_not_block_the_parent():
    """Model calls written without ever reading a reply: the parent stays responsive and returns
    within the wall limit + KILL_SLACK s (the old parent hung in a blocking write)."""
    lim = SandboxLimits(cpu_seconds=20, wall_seconds=3)
    code = PROTO + ("def f(x):\n    line = (json.dumps({'rpc': 'generate', 'prompt': 'p', 'image_ids': []}) + '\\n').encode()\n"
                    "    while True:\n        os.write(PROTO, line)\n")
    t0 = time.monotonic()
    r = run(code, limits=lim, rpc={"generate": lambda prompt, image_ids: "y" * 20000})
    assert time.monotonic() - t0 < lim.wall_seconds + KILL_SLACK
    assert not r.ok and r.outputs == [] and r.killed and r.killed.startswith(("rpc flood", "rpc limit", "wall-clock"))
    # a flood that does read its replies is stopped by the call budget
    r = run("def f(x):\n    while True:\n        generate('p')\n", rpc={"generate": lambda **kw: "y"},
            limits=SandboxLimits(wall_seconds=4, max_rpc_calls=500))
    assert not r.ok and r.killed == "rpc limit"


# ------------------------------------------------------------------ the protocol

FORGED = "os.write(PROTO, (json.dumps({'result': {'outputs': [1.0] * len(ARGS), 'errors': [None] * len(ARGS), 'load_error': None}}) + '\\n').encode())"


@pytest.mark.parametrize("then,killed", [("while True:\n        pass", "cpu"), ("os._exit(3)", None),
                                         ("__import__('ctypes').string_at(0)", "signal 11"),
                                         ("os.kill(os.getpid(), 9)", "protocol: malformed or repeated result"),
                                         ("import time; time.sleep(60)", "wall-clock")])
def test_forged_result_is_never_ok(then, killed):
    lim = SandboxLimits(cpu_seconds=1, wall_seconds=2.5)
    r = run(PROTO + "ARGS = [1]\ndef f(x):\n    " + FORGED + "\n    " + then + "\n", limits=lim)
    assert not r.ok and r.outputs == [] and r.first_error()
    # a CPU-bound spin may meet the wall clock first on a loaded machine
    assert r.killed == killed or (killed == "cpu" and r.killed == "wall-clock"), r.killed
    assert killed or r.returncode == 3


def test_forged_scores_through_run_scorer_are_rejected():
    items = [it for it in procedural_pool(n_items=40, seed=0) if it.answer_type == "numeric"][:4]
    pairs = [(it, "definitely wrong") for it in items]
    code = PROTO + "ARGS = [0] * 4\ndef eval_score(doc, prediction):\n    " + FORGED + "\n    while True:\n        pass\n"
    sb = run_scorer(code, pairs, SandboxLimits(cpu_seconds=1, wall_seconds=3))
    assert not sb.ok and sb.outputs == [] and sb.first_error()
    # a second result line, or one with the wrong shape, is a protocol error
    r = run(PROTO + "ARGS = [1]\ndef f(x):\n    " + FORGED + "\n    " + FORGED + "\n    return 1\n")
    assert not r.ok and r.killed.startswith("protocol")


def test_non_finite_and_out_of_range_scores_are_rejected():
    items = [it for it in procedural_pool(n_items=40, seed=0) if it.answer_type == "mc"][:1]
    values = ["float('nan')", "float('inf')", "-float('inf')", "1e9", "-0.5", "'1.0'", "True", "None", "0.5", "1"]
    code = "VALUES = [" + ", ".join(values) + "]\ndef eval_score(doc, prediction):\n    return VALUES[int(prediction)]\n"
    sb = run_scorer(code, [(items[0], str(k)) for k in range(len(values))], L)
    assert sb.ok, sb.first_error()
    assert sb.outputs[-2:] == [0.5, 1] and sb.outputs[:-2] == [None] * (len(values) - 2)
    assert all(e and e.startswith("output rejected") for e in sb.errors[:-2]) and sb.errors[-2:] == [None, None]
    assert sb.first_error().startswith("output rejected for input 0")


# ------------------------------------------------------------------ least knowledge

def test_gold_answers_are_unreadable_from_the_inference_job(tmp_path):
    from embeval_analysis.a2eval.lmms_export import export_lmms_task

    items = procedural_pool(n_items=24, seed=3)
    items = [next(it for it in items if it.answer_type == t) for t in sorted({it.answer_type for it in items})]
    task = export_lmms_task(tmp_path / "task", items, {}, {it.answer_type: "def eval_score(d, p):\n    return 0.0\n"
                                                           for it in items})
    data = task.parent / "data.jsonl"
    assert data.exists() and all(json.loads(l)["answer"] is not None for l in data.read_text().splitlines())
    code = ("import os, json\ndef run_vlm_inference(doc):\n    found = []\n"
            "    for top in os.listdir('/'):\n        if top in ('proc', 'dev', 'sys'):\n            continue\n"
            "        for root, dirs, files in os.walk('/' + top):\n"
            "            found += [os.path.join(root, n) for n in files if n.endswith(('.jsonl', '.yaml', '.parquet'))]\n"
            f"    return json.dumps({{'doc': doc, 'found': found, 'data': os.path.exists({str(data)!r})}})\n")

    class Echo:
        def generate(self, images, prompt):
            return "A"

    r = run_inference(code, Echo(), items, L)
    assert r.ok, r.first_error()
    for it, o in zip(items, r.outputs):
        got = json.loads(o)
        assert got["found"] == [] and got["data"] is False
        assert set(got["doc"]) == {"id", "question", "options", "answer_type", "image_ids"}
        assert "answer" not in got["doc"] and "mask" not in got["doc"] and "tolerance" not in got["doc"]
    # the scorer sees its answer type's gold fields and nothing more
    for it in items:
        d = item_doc(it, True)
        assert set(d) - {"id", "question", "options", "answer_type", "image_ids"} == set(GOLD_FIELDS[it.answer_type])


def test_no_leftovers_after_killed_runs(tmp_path, monkeypatch):
    """Killed jobs leave no open descriptor, no temporary file of the host side (its temporary folder is this test's
    own, so that other processes' files in /tmp do not count) and nothing of what the job wrote to its /tmp."""
    import tempfile

    own = tmp_path / "tmp"
    own.mkdir()
    monkeypatch.setenv("TMPDIR", str(own))
    monkeypatch.setattr(tempfile, "tempdir", str(own))
    marker = f"leak-{uuid.uuid4().hex}"
    fds = open_fds()
    for code in ("def f(x):\n    while True:\n        pass", "import time\ndef f(x):\n    time.sleep(9)",
                 f"def f(x):\n    open('/tmp/{marker}', 'w').write('y' * 1000)\n    return 1"):
        run(code, limits=SandboxLimits(cpu_seconds=1, wall_seconds=1.5))
    assert open_fds() == fds
    assert list(own.iterdir()) == []
    assert not Path("/tmp", marker).exists() and not (own / marker).exists()


def test_a_result_with_the_wrong_number_of_outputs_is_not_ok():
    r = run(PROTO + "ARGS = [1, 2]\ndef f(x):\n    " + FORGED + "\n    os._exit(0)\n")
    assert not r.ok and r.outputs == [] and r.killed == "protocol: 2 outputs for 1 inputs"


def test_model_calls_from_inference_code_are_bounded():
    items = procedural_pool(n_items=12, seed=1)[:2]

    class Count:
        calls = 0

        def generate(self, images, prompt):
            Count.calls += 1
            return "A"

    code = ("def run_vlm_inference(doc):\n    out = []\n"
            "    for ids in ([0] * 1000, [99], 'x'):\n        try:\n            generate('p', ids)\n"
            "        except RuntimeError as e:\n            out.append(str(e))\n    return ' | '.join(out)\n")
    r = run_inference(code, Count(), items, L)
    assert r.ok and Count.calls == 0
    parts = [o.split(" | ") for o in r.outputs]
    assert all(len(p) == 3 and all(x.startswith("ValueError: image_ids") for x in p) for p in parts), r.outputs


def test_job_dies_with_its_parent():
    """--die-with-parent: when the process that called run_sandboxed is SIGKILLed, the job goes too."""
    import signal
    import subprocess
    import sys

    marker = f"embeval-orphan-{uuid.uuid4().hex}"
    job = ("import os, sys\ndef f(x):\n    os.execv(sys.executable, [sys.executable, '-c', "
           f"'import time\\nwhile True: time.sleep(0.05)', {marker!r}])\n")
    script = ("from embeval_analysis.a2eval.sandbox import run_sandboxed, SandboxLimits\n"
              f"run_sandboxed({job!r}, 'f', [[1]], SandboxLimits(wall_seconds=60, cpu_seconds=60))\n")
    parent = subprocess.Popen([sys.executable, "-c", script], env={**os.environ}, stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.monotonic()
        # the job: the process whose last argument is the marker (the parent and its children before they exec
        # carry the marker inside the parent's script, and are not the job)
        job_pids = lambda: [p for p in marker_processes(marker) if _last_arg(p) == marker.encode()]  # noqa: E731
        # a cold start on a loaded 2-core machine took > 20 s; a parent that ended has nothing more to start
        while not job_pids() and parent.poll() is None and time.monotonic() - t0 < 120:
            time.sleep(0.05)
        if not job_pids():
            rc = parent.poll()
            why = (f"the parent exited with status {rc}: {parent.stderr.read()[-600:]}" if rc is not None
                   else f"the parent still runs after {time.monotonic() - t0:.0f} s")
            pytest.fail(f"the job never started ({why})")
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        t0 = time.monotonic()
        while marker_processes(marker) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        left = marker_processes(marker)  # the parent's own cmdline holds the marker too: gone as well
        assert left == [], [Path(f"/proc/{p}/status").read_text()[:300] for p in left]
    finally:
        parent.kill()
        parent.wait()
