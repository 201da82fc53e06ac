#!/usr/bin/env bash
# Create or update the project's virtual environment (.venv) with everything embeval needs.
# Idempotent: a stamp keyed on this script, pyproject.toml and the Python version makes a
# re-run with nothing changed a fast no-op. Used by `make demo`, `make test` and `make bench`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
# PyTorch from the registry (its CUDA build runs on the CPU): torchvision has no CPU build here,
# and pyiqa needs torchvision. Pinned below LeRobot's upper bounds (torch<2.11, torchvision<0.26).
TORCH_SPEC="torch==2.10.0"
TORCHVISION_SPEC="torchvision==0.25.0"
LEROBOT_SPEC="lerobot==0.4.4"
LLAMA_SPEC="llama-cpp-python==0.3.36"
# Portable llama.cpp build: the default native build segfaults on some CPUs (AMX paths).
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"

# System package: bwrap (Debian/Ubuntu package bubblewrap) runs the A2Eval sandbox's untrusted code
# in fresh namespaces. Checked on every run (cheap), before the venv stamp.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[install] 0/4 bubblewrap (the A2Eval sandbox)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "[install] error: the A2Eval sandbox needs bwrap: install the package 'bubblewrap'" \
         "(as root: apt-get install -y bubblewrap), then run this script again" >&2
    exit 1
  fi
fi

KEY=$( { cat "$0" pyproject.toml scripts/constraints.txt; "$PYTHON" --version; } | sha256sum | cut -c1-16)
STAMP="$VENV/.embeval-install-$KEY"
if [ -f "$STAMP" ]; then
  exit 0
fi

echo "[install] preparing $VENV (install key $KEY); first run takes several minutes"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# An up-to-date pip: pip 23's resolver crashes on the ROS wheels' egg-info metadata.
"${PIP[@]}" install -q --upgrade "pip>=25"

echo "[install] 1/4 PyTorch ($TORCH_SPEC, $TORCHVISION_SPEC)"
"${PIP[@]}" install -q --isolated "$TORCH_SPEC" "$TORCHVISION_SPEC"

echo "[install] 2/4 embeval (editable) with the ROS 2 Kilted wheels and LeRobot"
"${PIP[@]}" install -q -c scripts/constraints.txt -e ".[ros]" -e src/embeval_ros "$LEROBOT_SPEC"

echo "[install] 3/4 llama-cpp-python (portable CPU build; cached after the first time)"
if ! "$VENV/bin/python" -c "import llama_cpp" >/dev/null 2>&1; then
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" FORCE_CMAKE=1 "${PIP[@]}" install -q -c scripts/constraints.txt "$LLAMA_SPEC"
fi

echo "[install] 4/4 checking the environment"
"$VENV/bin/python" - <<'PY'
import importlib
for mod in ["torch", "torchvision", "pybullet", "ikpy", "rosbags", "pyiqa", "rclpy", "std_msgs.msg",
            "sensor_msgs.msg", "sklearn", "scipy", "embeval", "llama_cpp", "lerobot"]:
    importlib.import_module(mod)
print("[install] environment OK")
PY

rm -f "$VENV"/.embeval-install-*
touch "$STAMP"
