"""Build ``diagnostic_msgs/DiagnosticArray`` status messages from plain dicts."""
from __future__ import annotations

from embeval_ros.conversions import ns_to_stamp

LEVELS = {"ok": 0, "warn": 1, "error": 2, "stale": 3}


def diag(name: str, level: str, message: str, values: dict, stamp_ns: int, hardware_id: str = "embeval"):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    arr = DiagnosticArray()
    ns_to_stamp(stamp_ns, arr.header.stamp)
    st = DiagnosticStatus(level=bytes([LEVELS[level]]), name=name, message=message[:500], hardware_id=hardware_id)
    st.values = [KeyValue(key=str(k), value=str(v)) for k, v in values.items()]
    arr.status = [st]
    return arr


def diag_values(arr) -> dict[str, str]:
    """The key-value pairs of the first status in a DiagnosticArray."""
    return {kv.key: kv.value for kv in arr.status[0].values} if arr.status else {}
