#!/usr/bin/env bash
# `make test`: install (scripts/install.sh) and the suite in two parts. Tests that drive a real-time loop (the UR
# controller emulator's 500 Hz RTDE link and its watchdog, the ROS graph on it, the servers' /health latency under load;
# pytest marker `serial`, given in tests/conftest.py by file) run first, one at a time in one process; they use under
# half of two cores, so the install's background jobs (the llama-cpp-python compile, LIBERO, the bytecode; nice 19,
# which none of these tests needs) finish beside them. Then the install is finished and everything else runs on
# $PYTEST_WORKERS worker processes (pytest-xdist, a file's tests kept together; default: one more than the cores).
# EMBEVAL_TEST_REALTIME_BESIDE=1 installs first and runs the real-time part at the same time as the rest instead, at
# normal priority beside the other part at nice 10 (see docs/results.md). PYTEST_WORKERS=0 runs the other part in this
# process. Extra arguments go to both pytest runs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${VENV:-.venv}/bin/python"
BESIDE="${EMBEVAL_TEST_REALTIME_BESIDE:-0}"
if [ "$BESIDE" != 1 ]; then
  bash scripts/install.sh --leave-background || exit 1
else
  bash scripts/install.sh || exit 1
fi
# Let Python and pytest keep bytecode (.pyc, pytest's rewritten test modules) for the processes after the first:
# with PYTHONDONTWRITEBYTECODE set, as on CI machines, every test process compiled its imports again.
unset PYTHONDONTWRITEBYTECODE
# one worker more than the cores: the tests wait on subprocesses, servers and sleeps part of the time (2 cores:
# 849 s with 3 workers, 914 s with 2); at most 8 (each worker holds its models in memory)
CORES=$(nproc 2>/dev/null || echo 2)
WORKERS="${PYTEST_WORKERS:-$(( CORES + 1 < 8 ? CORES + 1 : 8 ))}"
STATUS=$(mktemp)
REPORT=$(mktemp)
trap 'rm -f "$STATUS" "$REPORT"' EXIT
# With no extra arguments the real-time part names its files (tests/conftest.py's SERIAL_FILES, read without importing
# it) instead of collecting and deselecting the whole suite again (~15 s).
SERIAL=()
if [ $# = 0 ]; then
  mapfile -t SERIAL < <("$PY" - <<'PY'
import ast
from pathlib import Path

tree = ast.parse(Path("tests/conftest.py").read_text())
names = next(ast.literal_eval(n.value.args[0]) for n in tree.body
             if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SERIAL_FILES")
print("\n".join(str(p) for p in sorted(Path("tests").rglob("test_*.py")) if p.name in names))
PY
)
fi
if [ "$BESIDE" != 1 ]; then
  EMBEVAL_TEST_STATUS_FILE="$STATUS" "$PY" -m pytest -m serial "${SERIAL[@]}" "$@"
  b=$?
  bash scripts/install.sh || exit 1
  "$PY" -m pytest -n "$WORKERS" --dist loadfile -m "not serial" "$@"
  a=$?
else
  EMBEVAL_TEST_STATUS_FILE="$STATUS" "$PY" -m pytest -m serial "${SERIAL[@]}" "$@" >"$REPORT" 2>&1 &
  rt=$!
  trap 'kill "$rt" 2>/dev/null; rm -f "$STATUS" "$REPORT"' EXIT
  echo "[test] the real-time part (marker 'serial') runs beside this one at normal priority; its report follows this one's"
  nice -n 10 "$PY" -m pytest -n "$WORKERS" --dist loadfile -m "not serial" "$@"
  a=$?
  wait "$rt"
  b=$?
  echo "[test] the real-time part:"
  cat "$REPORT"
fi
[ "$b" = 5 ] && b=0  # the arguments selected no real-time test
# A native library (ur_rtde, Fast DDS) can crash the interpreter while it exits, after pytest has written its
# verdict (tests/conftest.py: pytest_sessionfinish). A crash then does not undo a verdict of "all passed";
# a crash before the verdict, or any failed test, still fails the run.
if [ "$b" -gt 128 ] && read -r status collected failed < "$STATUS" 2>/dev/null && [ "$status" = 0 ]; then
  echo "[test] the real-time part passed ($collected tests, $failed failed); the interpreter then died by signal" \
       "$((b - 128)) while exiting: counted as passed" >&2
  b=0
fi
exit $(( a != 0 ? a : b ))
