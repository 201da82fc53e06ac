"""The sandbox runs code, answers model calls, reports errors and limits, and checks its outputs.
The hostile programs are in tests/analysis/a2eval/test_sandbox_containment.py."""
from __future__ import annotations


import pytest

from embeval_analysis.a2eval import sandbox as S
from embeval_analysis.a2eval.sandbox import SandboxLimits, run_sandboxed, score_check

L = SandboxLimits(cpu_seconds=2, wall_seconds=6, memory_bytes=1 << 30)


def run(code, **kw):
    return run_sandboxed(code, "f", kw.pop("inputs", [[1]]), kw.pop("limits", L), **kw)


def test_plain_code_and_rpc_work():
    r = run("import numpy as np\ndef f(x):\n    return float(np.sum([x, 2])) + len(generate('hi', [0]))",
            rpc={"generate": lambda prompt, image_ids: prompt.upper()})
    assert r.ok and r.outputs == [5.0] and r.errors == [None], r.first_error()
    assert r.isolation["method"] == "bubblewrap" and "network" in r.isolation["namespaces"] and r.isolation["seccomp"]
    r = run("def f(x):\n    return 1 / 0")
    assert r.ok and "ZeroDivisionError" in r.errors[0] and "line 2" in r.errors[0]
    r = run("def f(x) return 1")
    assert "SyntaxError" in r.load_error
    r = run("import json\ndef f(x):\n    return json.loads(generate('q'))", rpc={"generate": lambda **kw: 1 / 0})
    assert r.ok and "ZeroDivisionError" in r.errors[0]  # the handler's error reaches the code, not the parent


def test_batch_of_inputs_and_announce():
    seen = []
    r = run("def f(x, y):\n    return x * y + len(generate(str(x)))", inputs=[[k, 2] for k in range(50)],
            rpc={"generate": lambda prompt, image_ids: "ab", "begin": lambda index: seen.append(index) or True},
            announce=True)
    assert r.ok and r.outputs == [2 * k + 2 for k in range(50)] and seen == list(range(50))


def test_only_allowed_third_party_packages_exist():
    r = run("def f(x):\n    import torch\n    return 1")
    assert r.ok and "No module named 'torch'" in r.errors[0]
    r = run("import numpy, re, json, statistics, decimal\ndef f(x):\n    return statistics.mean([x, 3])")
    assert r.ok and r.outputs == [2]


def test_infinite_loop_is_killed_by_cpu_limit():
    lim = SandboxLimits(cpu_seconds=1, wall_seconds=15)  # generous wall: the machine may be loaded
    r = run("def f(x):\n    while True:\n        pass", limits=lim)
    assert not r.ok and r.killed == "cpu" and r.seconds < lim.wall_seconds
    assert r.outputs == [] and r.first_error().startswith("the sandbox killed the code (cpu)")


def test_sleeping_code_is_killed_by_wall_clock():
    r = run("import time\ndef f(x):\n    time.sleep(60)", limits=SandboxLimits(wall_seconds=2))
    assert not r.ok and r.killed == "wall-clock" and r.seconds < 4


def test_file_size_limit_and_tmpfs_size():
    r = run("def f(x):\n    open('big', 'wb').write(b'0' * (8 << 20))\n    return 1",
            limits=SandboxLimits(file_size_bytes=1 << 20))
    assert r.ok and r.outputs == [None] and "File too large" in r.errors[0]
    code = "def f(x):\n    for k in range(64):\n        open(f'/tmp/f{k}', 'wb').write(b'0' * (1 << 20))\n    return 1"
    r = run(code, limits=SandboxLimits(file_size_bytes=2 << 20, tmpfs_bytes=8 << 20))
    assert r.ok and r.outputs == [None] and "No space left on device" in r.errors[0]


def test_score_check_and_finiteness():
    chk = score_check(0, 1)
    assert chk(0.5) is None and chk(1) is None
    for bad in (float("nan"), float("inf"), 1e9, -0.1, "1", True, None):
        assert chk(bad), bad
    assert S.finite_problem([1, {"a": float("-inf")}]) and S.finite_problem("nan") is None
    r = run("def f(x):\n    return [x, float('nan')]")
    assert r.ok and r.outputs == [None] and "non-finite" in r.errors[0]


def test_seccomp_program_shape():
    prog = S.seccomp_program(arch="x86_64")
    assert len(prog) % 8 == 0 and len(prog) // 8 < 255
    assert S.seccomp_program(allow_fork=True, arch="x86_64") != prog
    assert S.seccomp_program(arch="sparc") is None


def test_missing_bwrap_names_the_package(monkeypatch):
    monkeypatch.setattr(S.shutil, "which", lambda name: None)
    monkeypatch.setattr(S, "BWRAP_CANDIDATES", ())
    with pytest.raises(S.SandboxUnavailable, match="install the package 'bubblewrap'"):
        S.check_bwrap.__wrapped__()
