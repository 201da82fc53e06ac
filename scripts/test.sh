#!/usr/bin/env bash
# `make test`: install (scripts/install.sh) and the suite in two parts. Tests that drive a real-time loop (the UR
# controller emulator's 500 Hz RTDE link and its watchdog, the ROS graph on it, the servers' /health latency under load;
# pytest marker `serial`, given in tests/conftest.py by file) run first, one at a time in one process; they use under
# half of two cores, so the install's background jobs (the llama-cpp-python compile, LIBERO's interpreter; nice 19,
# which none of these tests needs) finish beside them. As soon as the install is finished, everything else starts on
# $PYTEST_WORKERS worker processes (pytest-xdist, a file's tests kept together, the longest files first; default: one
# more than the cores) at nice 19 beside the real-time tests still running, whose report then follows its own.
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
STARTED=$(mktemp -u)  # exists once the rest has started
HELD=$(mktemp)
INSTALLED=$(mktemp)
RTPID=$(mktemp)
RTRC=$(mktemp)
trap 'rm -f "$STATUS" "$REPORT" "$STARTED" "$HELD" "$INSTALLED" "$RTPID" "$RTRC"' EXIT
# copies its input to stdout until the file argv[1] exists, then appends it to the file argv[2]
GATE='
import os, sys
out = sys.stdout.buffer
while chunk := os.read(0, 65536):
    if out is sys.stdout.buffer and os.path.exists(sys.argv[1]):
        out = open(sys.argv[2], "ab", buffering=0)
    out.write(chunk)
    out.flush()
'
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
  # The real-time part's output goes to the terminal until the rest starts beside it, then into $HELD (shown after).
  # setsid: its own process group, so that an interrupted run ends it and the servers and nodes it started.
  ( EMBEVAL_TEST_STATUS_FILE="$STATUS" setsid "$PY" -m pytest -m serial "${SERIAL[@]}" "$@" &
    echo $! > "$RTPID"
    wait $!
    echo $? > "$RTRC" ) 2>&1 | "$PY" -u -c "$GATE" "$STARTED" "$HELD" &
  rt=$!  # the gate, which ends after the real-time part
  trap 'kill -- "-$(cat "$RTPID" 2>/dev/null)" 2>/dev/null; rm -f "$STATUS" "$REPORT" "$STARTED" "$HELD" "$INSTALLED" "$RTPID" "$RTRC"' EXIT
  trap 'exit 130' INT  # Ctrl-C while this shell waits for the real-time part (the `wait` below) ends it too
  trap 'exit 143' TERM
  if ! bash scripts/install.sh > "$INSTALLED" 2>&1; then
    cat "$INSTALLED"
    exit 1
  fi
  touch "$STARTED"
  if kill -0 "$rt" 2>/dev/null; then
    echo
    cat "$INSTALLED"
    echo "[test] the rest starts at nice 19 beside the real-time tests still running (their report follows this one's)"
  else
    cat "$INSTALLED"
  fi
  nice -n 19 "$PY" -m pytest -n "$WORKERS" --dist loadfile --no-loadscope-reorder -m "not serial" "$@"
  a=$?
  until [ -s "$RTRC" ] || ! kill -0 "$rt" 2>/dev/null; do sleep 0.5; done  # the real-time part's end
  kill -- "-$(cat "$RTPID")" 2>/dev/null  # what its tests left running would hold the gate's input open
  wait "$rt"
  b=$(cat "$RTRC")
  [ -n "$b" ] || b=1
  if [ -s "$HELD" ]; then
    echo "[test] the real-time part, from where the rest started beside it:"
    cat "$HELD"
  fi
else
  EMBEVAL_TEST_STATUS_FILE="$STATUS" "$PY" -m pytest -m serial "${SERIAL[@]}" "$@" >"$REPORT" 2>&1 &
  rt=$!
  trap 'kill "$rt" 2>/dev/null; rm -f "$STATUS" "$REPORT"' EXIT
  echo "[test] the real-time part (marker 'serial') runs beside this one at normal priority; its report follows this one's"
  nice -n 10 "$PY" -m pytest -n "$WORKERS" --dist loadfile --no-loadscope-reorder -m "not serial" "$@"
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
