"""Operator console for a real cell: one key answers the conductor (``embeval operator``).

Keys: ``y`` the episode that just ended succeeded (/embeval/conductor/success, std_srvs/SetBool true),
``n`` it failed (false), Enter or space: next (/embeval/conductor/next, std_srvs/Trigger: the cell is
set up for the next episode; or, after an Act2Answer unit, keep the cube's TCP estimate), ``q`` quit.
The conductor records a y/n answer as ``success_source: operator``; the scorer awards 100 on success.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from embeval_ros import topics as T

#: key -> (service, SetBool data or None for the Trigger)
KEYS: dict[str, tuple[str, bool | None]] = {
    "y": (T.CONDUCTOR_SUCCESS, True), "n": (T.CONDUCTOR_SUCCESS, False),
    "\r": (T.CONDUCTOR_NEXT, None), "\n": (T.CONDUCTOR_NEXT, None), " ": (T.CONDUCTOR_NEXT, None),
}
HELP = "y = success, n = failure, Enter/space = next (cell set up / keep the estimate), q = quit"


class Answer(NamedTuple):
    """What became of one key: ``delivered`` is True only when the conductor received and accepted it."""

    delivered: bool
    text: str


class OperatorConsole:
    """A small rclpy client node that sends the operator's key to the conductor and returns its answer."""

    def __init__(self, context=None, timeout_s: float = 5.0):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from std_srvs.srv import SetBool, Trigger

        self.node = rclpy.create_node("embeval_operator", context=context)
        self.timeout_s = float(timeout_s)
        self.clients = {T.CONDUCTOR_SUCCESS: (self.node.create_client(SetBool, T.CONDUCTOR_SUCCESS), SetBool),
                        T.CONDUCTOR_NEXT: (self.node.create_client(Trigger, T.CONDUCTOR_NEXT), Trigger)}
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)

    def send(self, key: str) -> Answer:
        """Send ``key`` (see :data:`KEYS`): the conductor's reply (``delivered`` as its ``success`` says), or a
        one-line error naming the fix (not delivered: an unknown key, no conductor, no answer in time)."""
        k = key if key in KEYS else key.lower()
        if k not in KEYS:
            return Answer(False, f"key {key!r} does nothing: {HELP}")
        service, data = KEYS[k]
        client, srv = self.clients[service]
        if not client.wait_for_service(timeout_sec=self.timeout_s):
            return Answer(False, f"no conductor answers {service}: is the graph running (same ROS_DOMAIN_ID, DDS "
                                 "settings)? Raise --timeout if it is starting")
        req = srv.Request(data=data) if data is not None else srv.Request()
        future = client.call_async(req)
        self.executor.spin_until_future_complete(future, timeout_sec=self.timeout_s)
        if not future.done():
            return Answer(False, f"{service} did not answer in {self.timeout_s:g} s; raise --timeout or check the graph")
        res = future.result()
        return Answer(bool(res.success), res.message)

    def press(self, key: str) -> str:
        """:meth:`send`'s text only."""
        return self.send(key).text

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()


#: the exit status when an answer was not delivered (no conductor, no reply in time, unknown key) or refused
NOT_DELIVERED = 2


def run(keys: Iterable[str], console: OperatorConsole, out: Callable[[str], None] = print,
        err: Callable[[str], None] | None = None) -> int:
    """Send each key of ``keys`` until ``q`` (or the keys run out); print each reply. Returns 0 when every key
    reached the conductor and was accepted, else :data:`NOT_DELIVERED` after one ``embeval: error:`` line on
    ``err`` (stderr) counting the keys that were not, so a script can tell."""
    import sys

    err = err or (lambda line: print(line, file=sys.stderr))
    out(HELP)
    sent = failed = 0
    for key in keys:
        if key.lower() == "q":
            break
        answer = console.send(key)
        sent, failed = sent + 1, failed + (not answer.delivered)
        out(f"{key.strip() or 'next'}: {answer.text}")
    if failed:
        err(f"embeval: error: {failed} of {sent} answer(s) not delivered or refused by the conductor (see above); "
            "start the graph (operator_confirm:=true) and answer again")
        return NOT_DELIVERED
    return 0


def read_keys() -> Iterable[str]:
    """Single key presses from a terminal (no Enter needed), else lines from stdin (their first character)."""
    import sys

    if not sys.stdin.isatty():
        for line in sys.stdin:
            yield line[:1] or "\n"
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        while True:
            ch = sys.stdin.read(1)
            if not ch:
                return
            yield ch
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
