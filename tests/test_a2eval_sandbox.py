"""The sandbox contains hostile code: infinite loop, fork bomb, memory bomb, network, writes outside
its folder, reading secrets. Each attack is run with every layer on, and again with the in-process
guard off to show the OS layer (rlimits, network namespace, uid drop, scrubbed env) holds alone."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from embeval_analysis.a2eval.sandbox import ALLOWED_MODULES, SandboxLimits, network_namespace_available, run_sandboxed

L = SandboxLimits(cpu_seconds=2, wall_seconds=8, memory_bytes=1 << 30)
ROOT = os.geteuid() == 0
# without the in-process guard, these layers need root (uid drop) or a network namespace
needs_root = pytest.mark.skipif(not ROOT, reason="the uid-drop layer needs root; the guard layer is tested above")


def run(code, **kw):
    return run_sandboxed(code, "f", [[1]], kw.pop("limits", L), **kw)


def test_plain_code_and_rpc_work():
    r = run("import numpy as np\ndef f(x):\n    return float(np.sum([x, 2])) + len(generate('hi', [0]))",
            rpc={"generate": lambda prompt, image_ids: prompt.upper()})
    assert r.ok and r.outputs == [5.0] and r.errors == [None]
    r = run("def f(x):\n    return 1 / 0")
    assert r.ok and "ZeroDivisionError" in r.errors[0] and "line 2" in r.errors[0]
    r = run("def f(x) return 1")
    assert "SyntaxError" in r.load_error


@pytest.mark.parametrize("guard", [True, False])
def test_infinite_loop_is_killed_by_cpu_limit(guard):
    t0 = time.monotonic()
    r = run("def f(x):\n    while True:\n        pass", guard=guard)
    assert not r.ok and r.killed == "cpu" and time.monotonic() - t0 < L.wall_seconds


def test_sleeping_code_is_killed_by_wall_clock():
    r = run("import time\ndef f(x):\n    time.sleep(60)", guard=False, limits=SandboxLimits(wall_seconds=3))
    assert not r.ok and r.killed == "wall-clock" and r.seconds < 6


@pytest.mark.parametrize("guard", [True, False])
def test_fork_bomb_is_contained(guard):
    t0 = time.monotonic()
    r = run("import os\ndef f(x):\n    while True:\n        os.fork()", guard=guard)
    assert time.monotonic() - t0 < L.wall_seconds + 3
    assert not (r.ok and r.errors == [None])
    if guard:
        assert "os.fork is not allowed" in r.errors[0]
    elif os.geteuid() == 0:
        assert r.killed in ("cpu", "wall-clock") or "Resource temporarily unavailable" in (r.errors[0] or "")


@pytest.mark.parametrize("guard", [True, False])
def test_memory_bomb_is_contained(guard):
    r = run("def f(x):\n    a = [bytearray(1 << 24) for _ in range(1000)]\n    return len(a)", guard=guard)
    assert (r.errors and r.errors[0] and "MemoryError" in r.errors[0]) or r.killed in ("memory", "cpu")


@pytest.mark.parametrize("guard", [True, False])
def test_network_is_unreachable(guard):
    if not guard and not network_namespace_available():
        pytest.skip("no network namespace here; the guard layer is tested with guard=True")
    code = ("import socket\ndef f(x):\n    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
            "    s.settimeout(2)\n    s.connect(('93.184.216.34', 80))\n    return 'connected'")
    r = run(code, guard=guard, allowed_modules=ALLOWED_MODULES + ("socket",))
    assert r.outputs != ["connected"]
    err = r.first_error() or ""
    assert any(s in err for s in ("not allowed", "unreachable", "Errno", "timed out")), err


@pytest.mark.parametrize("guard", [True, pytest.param(False, marks=needs_root)])
def test_writes_outside_the_sandbox_are_refused(guard, tmp_path):
    target = Path("/work/main/.a2eval_sandbox_escape") if guard is False else tmp_path / "escape.txt"
    r = run(f"def f(x):\n    open({str(target)!r}, 'w').write('pwned')\n    return 1", guard=guard)
    assert r.outputs != [1] and not target.exists()
    assert "PermissionError" in r.errors[0]
    inside = run("def f(x):\n    open('ok.txt', 'w').write('fine')\n    return open('ok.txt').read()")
    assert inside.outputs == ["fine"]


def test_file_size_limit():
    r = run("def f(x):\n    open('big', 'wb').write(b'0' * (8 << 20))\n    return 1",
            limits=SandboxLimits(file_size_bytes=1 << 20))
    assert r.outputs != [1]


@pytest.mark.parametrize("guard", [True, pytest.param(False, marks=needs_root)])
def test_environment_secrets_are_not_visible(guard, monkeypatch):
    monkeypatch.setenv("A2EVAL_TEST_SECRET", "hunter2")
    r = run("import os\ndef f(x):\n    return dict(os.environ)", guard=guard)
    assert r.ok and "A2EVAL_TEST_SECRET" not in r.outputs[0] and "hunter2" not in str(r.outputs[0])
    r = run(f"def f(x):\n    return open('/proc/{os.getpid()}/environ').read()", guard=guard)
    assert r.outputs != [None] or "hunter2" not in str(r.outputs)
    assert "hunter2" not in str(r.outputs) and r.errors[0] and "PermissionError" in r.errors[0]
