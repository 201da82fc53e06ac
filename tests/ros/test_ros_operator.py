"""``embeval operator`` tells a script whether its answer arrived: exit 0 only when every key reached the conductor
and was accepted; exit 2 with one ``embeval: error:`` line when it refuses an answer or for a key that does nothing
(no conductor at all: test_ros_execution_success.test_operator_cli_without_a_conductor_says_so)."""
from __future__ import annotations

import threading

import pytest

rclpy = pytest.importorskip("rclpy", reason="the ROS 2 wheels (ros-rclpy) are not installed: run scripts/install.sh")

pytestmark = pytest.mark.ros


@pytest.mark.parametrize("value", ["nan", "-1", "0", "1e9"])
def test_timeout_must_be_finite_and_positive(capsys, value):
    from embeval_cli import main

    with pytest.raises(SystemExit) as exc:
        main(["operator", "--timeout", value])
    assert exc.value.code == 2
    problem = (f"must be a finite number in (0, 3600] s, got {value}" if value == "nan"
               else f"must lie in (0, 3600] s, got {float(value)!r}")  # embeval.checks' wording
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"embeval operator: error: argument --timeout: {problem}"


@pytest.fixture
def conductor():
    """A stand-in conductor in a private context: accepts a success verdict, refuses a failure one (as the real
    conductor refuses a verdict nothing awaits), accepts next."""
    from rclpy.executors import SingleThreadedExecutor
    from std_srvs.srv import SetBool, Trigger

    from embeval_ros import topics as T

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("fake_conductor", context=ctx)

    def verdict(req, res):
        res.success, res.message = (True, "recorded: success (operator)") if req.data else (False, "no episode awaits a verdict")
        return res

    def nxt(req, res):
        res.success, res.message = True, "next"
        return res

    node.create_service(SetBool, T.CONDUCTOR_SUCCESS, verdict)
    node.create_service(Trigger, T.CONDUCTOR_NEXT, nxt)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    thread = threading.Thread(target=ex.spin, daemon=True)
    thread.start()
    yield ctx
    ex.shutdown()
    node.destroy_node()
    rclpy.shutdown(context=ctx)
    thread.join(5)


@pytest.mark.parametrize("keys, rc, failed", [(["y", "\n"], 0, 0), (["y", "n"], 2, 1), (["x", "y"], 2, 1)])
def test_exit_status_says_whether_every_answer_was_accepted(conductor, keys, rc, failed):
    from embeval_ros.operator import OperatorConsole, run

    console = OperatorConsole(context=conductor, timeout_s=10)
    out, err = [], []
    try:
        assert run(keys, console, out=out.append, err=err.append) == rc
    finally:
        console.close()
    assert out[1] == "y: recorded: success (operator)" or out[2] == "y: recorded: success (operator)"
    if failed:
        assert err == [f"embeval: error: {failed} of {len(keys)} answer(s) not delivered or refused by the conductor "
                       "(see above); start the graph (operator_confirm:=true) and answer again"]
    else:
        assert err == [] and out[2] == "next: next"
