"""docs/bring_your_model.md's commands, run as written (the port swapped for a free one): each `embeval serve`
command is started as its own process on 127.0.0.1, the Python block after it talks to it with the peer's own
client (openpi-client, vla-eval, json_numpy) and must exit 0 printing what the page says; other commands exit 0."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs/bring_your_model.md"
BLOCK = re.compile(r"```(bash|python)\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(PAGE.read_text())


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "analysis"), env.get("PYTHONPATH", "")])
    return env


def test_page_has_the_four_routes_and_a_command_each():
    text = PAGE.read_text()
    for route in ("openpi", "vla-evaluation-harness", "OpenVLA REST", "LeRobot"):
        assert f"{route}" in text
    kinds = [k for k, _ in _blocks()]
    assert kinds.count("bash") == 4 and kinds.count("python") == 3


def test_page_commands_run():
    from embeval.serving.runner import free_local_port, start_serve_process

    blocks = _blocks()
    outputs = []
    for i, (kind, text) in enumerate(blocks):
        if kind != "bash":
            continue
        cmd = text.strip()
        if not cmd.startswith("embeval serve "):
            exe = Path(sys.executable).parent / "embeval"
            r = subprocess.run([str(exe), *cmd.split()[1:]], env=_env(), capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr[-500:]
            assert "openpi" in r.stdout and "vla-eval" in r.stdout and "lerobot-server" in r.stdout
            continue
        args = cmd.split()[2:]
        old_port = args[args.index("--port") + 1]
        port = free_local_port()
        args = args[:args.index("--port")]
        proc, _ = start_serve_process(args, port=port, env=_env(), timeout=90)
        try:
            kind2, code = blocks[i + 1]
            assert kind2 == "python"
            code = code.replace(f"{old_port})", f"{port})").replace(f":{old_port}", f":{port}")
            assert str(port) in code
            r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr[-800:]
            outputs.append(r.stdout.strip())
        finally:
            proc.terminate()
            proc.wait(10)
    assert outputs[0] == "libero (1, 7)"
    assert outputs[1] == "embeval:image-stats-policy (7,)"
    assert outputs[2] == "200 7"
