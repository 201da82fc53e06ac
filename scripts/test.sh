#!/usr/bin/env bash
# `make test`: install (scripts/install.sh) and the suite in three parts. Tests that drive a real-time loop (the UR
# controller emulator's 500 Hz RTDE link and its watchdog, the ROS graph on it, the servers' /health latency under load;
# pytest marker `serial`, given in tests/conftest.py by file) run first, one at a time in one process; they use under
# half of two cores, so the install's background jobs (the llama-cpp-python compile, LIBERO, the bytecode; nice 19,
# which none of these tests needs) finish beside them, and a few CPU-bound files that need only install steps 1-3
# (marker `early`) run beside them at nice 19 too, on the CPU left idle. Then the install is finished and everything
# else runs on $PYTEST_WORKERS worker processes (pytest-xdist, a file's tests kept together; default: one more than
# the cores). EMBEVAL_TEST_REALTIME_BESIDE=1 installs first and runs the real-time part at the same time as the rest
# instead, at normal priority beside the other part at nice 10 (see docs/results.md). PYTEST_WORKERS=0 runs the other
# part in this process. Extra arguments go to every pytest run (the early files then run in the parallel part).
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
ESTATUS=$(mktemp)
REPORT=$(mktemp)
early=""
trap '[ -n "$early" ] && kill "$early" 2>/dev/null; rm -f "$STATUS" "$ESTATUS" "$REPORT"' EXIT
# The test files of one of tests/conftest.py's file sets (SERIAL_FILES, EARLY_FILES; read without importing it): a
# part that names its files does not collect and deselect the whole suite again (~15 s).
files_of() {
  "$PY" - "$1" <<'PY'
import ast
import sys
from pathlib import Path

tree = ast.parse(Path("tests/conftest.py").read_text())
names = next(ast.literal_eval(n.value.args[0]) for n in tree.body
             if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == sys.argv[1])
print("\n".join(str(p) for p in sorted(Path("tests").rglob("test_*.py")) if p.name in names))
PY
}
# A native library (ur_rtde, Fast DDS) can crash the interpreter while it exits, after pytest has written its
# verdict (tests/conftest.py: pytest_sessionfinish). A crash then does not undo a verdict of "all passed";
# a crash before the verdict, or any failed test, still fails the run. Exit status 5 (no test selected) passes.
verdict() {  # verdict NAME STATUS STATUS_FILE
  local rc=$2 status collected failed
  [ "$rc" = 5 ] && rc=0
  if [ "$rc" -gt 128 ] && read -r status collected failed < "$3" 2>/dev/null && [ "$status" = 0 ]; then
    echo "[test] the $1 part passed ($collected tests, $failed failed); the interpreter then died by signal" \
         "$((rc - 128)) while exiting: counted as passed" >&2
    rc=0
  fi
  echo "$rc"
}
SERIAL=()
[ $# = 0 ] && mapfile -t SERIAL < <(files_of SERIAL_FILES)
e=0
if [ "$BESIDE" != 1 ]; then
  NOT_EARLY=""
  if [ $# = 0 ]; then
    mapfile -t EARLY < <(files_of EARLY_FILES)
    EMBEVAL_TEST_STATUS_FILE="$ESTATUS" nice -n 19 "$PY" -m pytest -m early "${EARLY[@]}" >"$REPORT" 2>&1 &
    early=$!
    NOT_EARLY=" and not early"
    echo "[test] the early part (marker 'early': ${EARLY[*]}) runs beside the real-time part at nice 19; its report" \
         "follows the real-time part's"
  fi
  EMBEVAL_TEST_STATUS_FILE="$STATUS" "$PY" -m pytest -m serial "${SERIAL[@]}" "$@"
  b=$?
  bash scripts/install.sh || exit 1
  if [ -n "$early" ]; then
    wait "$early"
    e=$?
    e=$(verdict early "$e" "$ESTATUS")
    early=""
    echo "[test] the early part:"
    cat "$REPORT"
  fi
  "$PY" -m pytest -n "$WORKERS" --dist loadfile -m "not serial$NOT_EARLY" "$@"
  a=$?
else
  EMBEVAL_TEST_STATUS_FILE="$STATUS" "$PY" -m pytest -m serial "${SERIAL[@]}" "$@" >"$REPORT" 2>&1 &
  rt=$!
  trap 'kill "$rt" 2>/dev/null; rm -f "$STATUS" "$ESTATUS" "$REPORT"' EXIT
  echo "[test] the real-time part (marker 'serial') runs beside this one at normal priority; its report follows this one's"
  nice -n 10 "$PY" -m pytest -n "$WORKERS" --dist loadfile -m "not serial" "$@"
  a=$?
  wait "$rt"
  b=$?
  echo "[test] the real-time part:"
  cat "$REPORT"
fi
b=$(verdict real-time "$b" "$STATUS")
exit $(( a != 0 ? a : (b != 0 ? b : e) ))
