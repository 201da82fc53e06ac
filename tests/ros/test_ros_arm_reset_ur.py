"""The arm node on ur_rtde against the UR emulator (real ur_rtde client): reset in dry run never moves, a home move
whose joint path leaves the box is refused, and a graph whose controller vanished exits 1 with one line saying so."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import start_ur_emulator

pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")

ROOT = Path(__file__).resolve().parents[2]


def _reset(arm):
    from std_srvs.srv import Trigger

    return arm._on_reset(Trigger.Request(), Trigger.Response())


def _params(ip: str, policy_dry_run, home) -> dict:
    from embeval_ros.graph import load_params

    p = load_params(ROOT / "config" / "embeval_ur5.yaml")
    return {"embeval_policy": {"dry_run": policy_dry_run},
            "embeval_arm": {**p["embeval_arm"], "robot_ip": ip, "home_joints": [float(v) for v in home]}}


def test_reset_moves_home_only_when_dry_run_is_off_and_never_out_of_the_box(ur_robot):
    from embeval_ros.graph import Graph

    from embeval.robot.ur_emulator.controller import Controller

    q0 = Controller().q.copy() if ur_robot.emulated else None
    if q0 is None:
        pytest.skip("moves a real arm by 0.2 rad; run against the emulator")
    home = q0 + [0.2, 0, 0, 0, 0, 0]  # a harmless home move (TCP stays in config/embeval_ur5.yaml's box)
    # the arm node only is started; its dry_run follows embeval_policy.dry_run (embeval graph's rule)
    with Graph(_params(ur_robot.ip, True, home), nodes=["embeval_arm"]) as g:
        arm = g.nodes["embeval_arm"]
        assert arm.dry_run is True
        arm.backend.reset_safety()
        arm.backend.move_joints(q0)
        r = _reset(arm)
        assert r.success and "dry run: NOT moved home" in r.message and "set dry_run:=false" in r.message
        assert np.max(np.abs(arm.backend.state().joint_positions - q0)) < 1e-6  # nothing moved
    with Graph(_params(ur_robot.ip, None, home), nodes=["embeval_arm"]) as g:  # an empty policy dry_run: still dry
        assert g.nodes["embeval_arm"].dry_run is True
    with Graph(_params(ur_robot.ip, False, home), nodes=["embeval_arm"]) as g:
        arm = g.nodes["embeval_arm"]
        assert arm.dry_run is False
        r = _reset(arm)
        assert r.success and r.message.endswith("at home")
        assert np.max(np.abs(arm.backend.state().joint_positions - home)) < 1e-4
        # a home whose TCP lies outside the box (base swung 1.2 rad: y = -0.42 m < -0.35): refused, latched, not sent
        arm.home_q = list(q0 + [-1.2, 0, 0, 0, 0, 0])
        r = _reset(arm)
        assert not r.success and "workspace limit: TCP x=0.163" in r.message and "y=-0.419" in r.message
        assert np.max(np.abs(arm.backend.state().joint_positions - home)) < 1e-6
        assert arm.backend.state().safety.stopped
        arm.home_q = list(q0)
        assert _reset(arm).success  # a good home clears and moves again


def test_graph_exits_1_when_the_arm_loses_its_controller(capsys):
    from embeval_cli import main

    target = start_ur_emulator()
    try:
        threading.Timer(1.5, target.process.proc.kill).start()
        rc = main(["graph", "--params", str(ROOT / "config" / "embeval_ur5.yaml"), "--nodes", "embeval_arm",
                   "--set", f"embeval_arm.robot_ip={target.ip}", "--duration", "3"])
    finally:
        target.process.close()
    out = capsys.readouterr().out
    assert rc == 1
    (line,) = [x for x in out.splitlines() if "LOST its controller" in x]
    assert "lost the connection to the UR controller" in line and line.endswith("exit 1")


def test_graph_exit_status_names_a_stop_during_the_run(ur_emulator, capsys):
    """A quiet run exits 0 without the line; a stop that a reset cleared still fails the run, naming the first cause."""
    from types import SimpleNamespace

    from embeval_cli import main
    from embeval_cli.graph import arm_fault
    from embeval.robot.ur_rtde_backend import URRtdeArm

    rc = main(["graph", "--params", str(ROOT / "config" / "embeval_ur5.yaml"), "--nodes", "embeval_arm",
               "--set", f"embeval_arm.robot_ip={ur_emulator.ip}", "--duration", "1.5"])
    out = capsys.readouterr().out
    assert rc == 0 and "embeval graph: the arm" not in out
    arm = URRtdeArm(ur_emulator.ip)
    try:
        assert arm_fault(SimpleNamespace(backend=arm)) == ""
        arm.protective_stop("operator pressed stop")
        assert arm_fault(SimpleNamespace(backend=arm)).startswith("embeval graph: the arm ended in protective_stop")
        assert arm.reset_safety().safety.ok
        assert arm_fault(SimpleNamespace(backend=arm)) == ("embeval graph: the arm protective-stopped during the run "
                                                           "(first: operator pressed stop); exit 1")
    finally:
        arm.close()


def test_arm_fault_names_a_state_that_cannot_be_read_even_after_a_lost_link():
    """A hardware backend whose state() raises (lost link or not) is a fault line, never a traceback at the end."""
    from types import SimpleNamespace

    from embeval_cli.graph import arm_fault

    class Gone:
        hardware, link_lost = True, True

        def state(self):
            raise RuntimeError("Timeout connecting to UR dashboard server.")

    assert arm_fault(SimpleNamespace(backend=Gone())) == (
        "embeval graph: the arm's state could not be read at the end (Timeout connecting to UR dashboard server.); exit 1")



def test_ctrl_c_of_the_graph_halts_a_move_in_progress(tmp_path):
    """A real SIGINT (the user's Ctrl-C) to an `embeval graph` process while the arm is in a 4 s move (2 cm at 5 mm/s):
    the arm stops at once, not after the move and the executors' shutdown, and the graph exits 130 saying the run was
    interrupted. A separate process, as a user runs it: no state of other tests can change how SIGINT is handled."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import rtde_receive

    target = start_ur_emulator()
    r = rtde_receive.RTDEReceiveInterface(target.ip)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "embeval_cli", "graph", "--params", str(ROOT / "config" / "embeval_ur5.yaml"),
         "--set", f"embeval_arm.robot_ip={target.ip}", "--set", "embeval_camera.source=sim",
         "--set", "embeval_policy.dry_run=false", "--set", "embeval_arm.tcp_speed=0.005",
         "--set", "embeval_arm.control_hz=0.5", "--set", "embeval_policy.rate_hz=0.5", "--duration", "90"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # SIG_DFL in the child, as in a terminal: a shell that ignores SIGINT (a background job) would pass that on
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 90
        while max(abs(v) for v in r.getActualQd()) == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, "embeval graph ended before the arm moved"
        time.sleep(0.3)  # well inside the move
        x, t = r.getActualTCPPose()[:3], time.monotonic()
        proc.send_signal(signal.SIGINT)
        while max(abs(v) for v in r.getActualQd()) > 0 and time.monotonic() < t + 10:
            time.sleep(0.005)
        stopped = time.monotonic() - t
        moved = float(np.linalg.norm(np.subtract(r.getActualTCPPose()[:3], x)))
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        r.disconnect()
        target.process.close()
    assert stopped < 1.5, f"the arm moved on for {stopped:.2f} s after Ctrl-C"
    assert moved < 0.006, moved  # at 5 mm/s: stopped, not the rest of the 2 cm step
    assert proc.returncode == 130 and "embeval graph: interrupted (Ctrl-C): the arm was halted" in out, out[-3000:]


def test_the_automatic_reset_never_overrides_a_stop_made_at_the_controller(ur_emulator):
    """The operator presses Stop (the dashboard's ``stop``) mid-run: /embeval/arm/reset (which the conductor calls before
    every episode) refuses to restart the script and says why; a stop embeval made itself is still reset; with
    ``reset_after_outside_stop: true`` the reset restarts the script."""
    import socket
    import time

    from embeval_ros.graph import Graph

    def dash(command):
        with socket.create_connection((ur_emulator.ip, 29999), 5.0) as s:
            f = s.makefile("rw")
            f.readline()
            f.write(command + "\n")
            f.flush()
            return f.readline().strip()

    params = _params(ur_emulator.ip, True, [0.0] * 6)
    params["embeval_arm"].pop("home_joints")
    with Graph(params, nodes=["embeval_arm"]) as g:
        arm = g.nodes["embeval_arm"]
        assert getattr(arm, "reset_after_outside_stop", False) is False
        arm.commander.protective_stop("embeval's own stop")  # ours: the reset clears it
        r = _reset(arm)
        assert r.success, r.message
        assert dash("stop") == "Stopped"
        deadline = time.monotonic() + 5
        while not arm.backend.state().safety.stopped and time.monotonic() < deadline:
            time.sleep(0.01)
        assert arm.backend.state().safety.stopped
        r = _reset(arm)
        assert not r.success and "reset refused: the ur_rtde control script stopped" in r.message, r.message
        assert "must not override the operator" in r.message and "reset_after_outside_stop" in r.message
        assert not arm.backend._ctrl.isProgramRunning() and arm.backend.state().safety.stopped
        arm.reset_after_outside_stop = True  # what the parameter sets
        r = _reset(arm)
        assert r.success and arm.backend._ctrl.isProgramRunning() and not arm.backend.stopped_outside


def test_a_wrong_ur_type_stops_the_arm_node_at_start(ur_emulator):
    """ur_type ur5e against the UR5 emulator: the arm node refuses to start (the controller's own FK at probe poses,
    no motion), so a dry run that never moves a joint cannot hide it; the right model starts."""
    from embeval_ros.graph import Graph

    from embeval.errors import ConfigError

    params = _params(ur_emulator.ip, True, [0.0] * 6)
    params["embeval_arm"].pop("home_joints")
    params["embeval_arm"]["ur_type"] = "ur5e"
    with pytest.raises(ConfigError, match=r"embeval_arm.ur_type: the ur5e kinematics \(ur_type\) disagree with the "
                                          r"controller's own by \d+ mm at the probe joints 0"), Graph(params, nodes=["embeval_arm"]):
        pass
    params["embeval_arm"]["ur_type"] = "UR5"
    with Graph(params, nodes=["embeval_arm"]) as g:
        assert g.nodes["embeval_arm"].backend.state().safety.ok
