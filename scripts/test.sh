#!/usr/bin/env bash
# `make test`: the suite in two parts. Tests that drive a real-time loop (the UR controller emulator's 500 Hz RTDE
# link and its watchdog, the ROS graph on it, the servers' /health latency under load) run one at a time, alone on
# the machine (pytest marker `serial`, given in tests/conftest.py by file); everything else runs on
# $PYTEST_WORKERS worker processes (pytest-xdist, a file's tests kept together), which halves the wall time on the
# 2-core CI machine. PYTEST_WORKERS=0 runs everything in one process. Extra arguments go to both pytest runs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${VENV:-.venv}/bin/python"
WORKERS="${PYTEST_WORKERS:-2}"
"$PY" -m pytest -n "$WORKERS" --dist loadfile -m "not serial" "$@"
a=$?
"$PY" -m pytest -m serial "$@"
b=$?
[ "$b" = 5 ] && b=0  # the arguments selected no real-time test
exit $(( a != 0 ? a : b ))
