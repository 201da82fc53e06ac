#!/usr/bin/env bash
# Create or update the project's virtual environment (.venv) with everything embeval needs.
# Idempotent: a stamp keyed on this script, pyproject.toml and the Python version makes a
# re-run with nothing changed a fast no-op. Used by `make demo`, `make test` and `make bench`.
# --leave-background (scripts/test.sh): return once all but the background jobs (the llama-cpp-python build, LIBERO;
# scripts/background.sh) is installed, leaving them running; the next plain run waits for them and finishes the install.
# Bytecode: uv writes no .pyc; Python writes each module's on its first import (the Makefile's targets and
# scripts/test.sh unset PYTHONDONTWRITEBYTECODE): `make test` from nothing wrote 10,600 of the venv's 30,100 files'.
# Compiling them all here took ~90 CPU-s, most of it for modules nothing imports.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LEAVE_BACKGROUND=0
case "${1:-}" in
  "") ;;
  --leave-background) LEAVE_BACKGROUND=1 ;;
  *) echo "[install] error: unknown argument '$1' (the one option is --leave-background)" >&2; exit 2 ;;
esac
# shellcheck source=scripts/background.sh
source scripts/background.sh

VENV="${VENV:-.venv}"
# Python 3.12 (LeRobot >= 0.5 requires it): scripts/find_python.sh looks on PATH, in pyenv and uv's Pythons, and
# stops here with one line naming the version and how to get it. LIBERO keeps its own 3.11 (scripts/install_libero.sh).
PYTHON=$(bash scripts/find_python.sh) || exit 1
# The versions and why each is held are in scripts/constraints.txt (the one place for pins).
TORCH_SPEC="torch==$(sed -n 's/^torch==\([0-9.]*\).*/\1/p' scripts/constraints.txt)"
TORCHVISION_SPEC="torchvision==$(sed -n 's/^torchvision==\([0-9.]*\).*/\1/p' scripts/constraints.txt)"
# LeRobot with what its policies and lerobot-train need: datasets, accelerate (training), diffusers (Diffusion
# Policy), transformers (SmolVLA, pi0, pi0.5, pi0-FAST, GR00T, X-VLA).
LEROBOT_SPEC="lerobot[dataset,training,diffusion,transformers-dep]==0.6.1"
# uv resolves and installs (a first install: about 4x faster than pip: PyTorch's wheels in 18 s instead of 79 s);
# EMBEVAL_INSTALLER=pip uses pip instead. uv reads the system's CA store (UV_NATIVE_TLS) like pip here.
UV_SPEC="uv==0.13.8"
LLAMA_SPEC="llama-cpp-python==0.3.36"
# ManiSkill3 (simulator backend, embeval.sim.maniskill) and its software-Vulkan runtime: Mesa's
# lavapipe from Debian bookworm-backports (Debian 12's own Mesa 22.3 lacks a feature SAPIEN needs).
MANISKILL_SPEC="mani_skill==3.0.1"
SAPIEN_SPEC="sapien==3.0.3"
MESA_VULKAN="mesa-vulkan-drivers=25.0.7-2~bpo12+1"
# Portable llama.cpp build: the default native build segfaults on some CPUs (AMX paths). LLAVA_BUILD=OFF:
# no libmtmd (multimodal chat handlers, imported lazily by llama_cpp and never by embeval): a shorter compile.
# scripts/llama_no_common.cmake leaves out llama.cpp's common library, which only its tools and libmtmd use.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF"
LLAMA_CMAKE_ARGS="$LLAMA_CMAKE_ARGS '-DCMAKE_PROJECT_INCLUDE=$PWD/scripts/llama_no_common.cmake'"  # split like a shell (shlex)

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

# System package: libusb-1.0 (Debian/Ubuntu libusb-1.0-0), which pyrealsense2's librealsense loads (RealSense camera and
# recordings). Checked on every run (cheap); without root or apt-get it says what to install and goes on.
if ! ldconfig -p 2>/dev/null | grep -q 'libusb-1\.0\.so\.0'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[install] libusb-1.0-0 (pyrealsense2)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libusb-1.0-0 >/dev/null
  else
    echo "[install] warning: pyrealsense2 needs libusb-1.0: install the package 'libusb-1.0-0'" \
         "(as root: apt-get install -y libusb-1.0-0); the RealSense source and its tests need it" >&2
  fi
fi

# System package for the tests: Debian's chromium, the real browser that tests/core/runs/test_report_browser.py opens the
# HTML report in. Installed in the background while pip works (about 130 packages, ~1 min); waited for before
# step 4, whose apt-get must not meet a held dpkg lock. Not root or no apt-get: that one test skips, saying why.
CHROMIUM_PID=""
start_chromium() {
  command -v chromium >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    mkdir -p "$VENV"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
      > "$VENV/.chromium-install.log" 2>&1 &
    CHROMIUM_PID=$!
  else
    echo "[install] note: chromium not installed (needs root and apt-get): the browser test of the HTML report will skip"
  fi
}
wait_chromium() {
  [ -n "$CHROMIUM_PID" ] || return 0
  if ! wait "$CHROMIUM_PID"; then
    echo "[install] WARNING: apt-get install chromium failed (log: $VENV/.chromium-install.log); the browser test will skip" >&2
  fi
  CHROMIUM_PID=""
}

# LIBERO / LIBERO-PRO (the `libero` simulator backend) live in their own interpreter, .venv-libero (LIBERO pins
# numpy 1.26.4, mujoco 2.3.7 and opencv-python<5, which embeval's .venv cannot share): scripts/install_libero.sh,
# ~780 MB of wheels, a background job from the start, waited for before step 5. EMBEVAL_LIBERO=0 skips it
# (the LIBERO tests then skip, naming the script).
start_libero() {
  [ "${EMBEVAL_LIBERO:-1}" = 0 ] && { echo "[install] EMBEVAL_LIBERO=0: LIBERO backend not installed"; return 0; }
  bg_start libero "$VENV/.libero-install.log" bash scripts/install_libero.sh
}
wait_libero() {
  if ! bg_wait libero; then
    echo "[install] WARNING: scripts/install_libero.sh failed (log: $VENV/.libero-install.log); the LIBERO backend and its tests are unavailable" >&2
    tail -n 5 "$VENV/.libero-install.log" >&2
  fi
}

KEY=$( { cat "$0" scripts/install_libero.sh scripts/find_python.sh pyproject.toml scripts/constraints.txt; "$PYTHON" --version; } | sha256sum | cut -c1-16)
STAMP="$VENV/.embeval-install-$KEY"
if [ -f "$STAMP" ]; then
  exit 0
fi
PREPARED="$VENV/.embeval-prepared-$KEY"  # all but the background jobs' results is installed (--leave-background)
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
if [ "${EMBEVAL_INSTALLER:-uv}" = uv ]; then
  export UV_NATIVE_TLS=1 UV_LINK_MODE="${UV_LINK_MODE:-copy}"
  INST=("$VENV/bin/uv" pip install --python "$VENV/bin/python" -q)
else
  INST=("${PIP[@]}" install -q)
fi
# Compiled from source (minutes of CPU): llama-cpp-python (PyPI has no wheels of it). Its wheel is built by a background
# job while steps 1-3 download and install; `pip wheel` writes nothing into the venv, so it never touches the
# installer's files; a built wheel is kept in pip's cache for the next venv.
WHEELS="$VENV/.built-wheels"
build_llama() {
  mkdir -p "$WHEELS"
  bg_start llama "$VENV/.llama-build.log" env CMAKE_ARGS="$LLAMA_CMAKE_ARGS" FORCE_CMAKE=1 \
    "${PIP[@]}" wheel -q --no-deps -w "$WHEELS/llama" "$LLAMA_SPEC"
}
has_llama() { "$VENV/bin/python" -c "import llama_cpp" >/dev/null 2>&1; }

if [ ! -f "$PREPARED" ]; then
echo "[install] preparing $VENV (install key $KEY); first run takes several minutes"
# A first install writes about 15 GB (.venv 12 GB, of which PyTorch's CUDA build is 6 GB; .venv-libero 2 GB;
# chromium; pip's unpacked wheels): refuse at once with the numbers rather than fail minutes later mid-pip with
# "No space left on device" and a half-written venv. An update of an existing venv writes little: not checked.
if [ ! -d "$VENV/lib" ] && [ "${EMBEVAL_SKIP_DISK_CHECK:-0}" != 1 ]; then
  NEED_GB=16
  FREE_GB=$(df -Pk "$(dirname "$VENV")" 2>/dev/null | awk 'NR == 2 {print int($4 / 1048576)}' || true)
  if [ -n "$FREE_GB" ] && [ "$FREE_GB" -lt "$NEED_GB" ]; then
    echo "[install] error: a first install needs about $NEED_GB GB free beside $VENV, and $(dirname "$VENV") has" \
         "$FREE_GB GB free. Free some space (pip's cache: $PYTHON -m pip cache purge), or set VENV to a folder on a" \
         "larger disk (make test VENV=/big/disk/.venv); EMBEVAL_SKIP_DISK_CHECK=1 tries anyway" >&2
    exit 1
  fi
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
rm -f "$VENV"/.embeval-prepared-*
start_chromium
start_libero
# An up-to-date pip: pip 23's resolver crashes on the ROS wheels' egg-info metadata.
"${PIP[@]}" install -q --upgrade "pip>=25"
[ "${EMBEVAL_INSTALLER:-uv}" = uv ] && "${PIP[@]}" install -q "$UV_SPEC"
rm -rf "$WHEELS"
has_llama || build_llama

echo "[install] 1/5 PyTorch ($TORCH_SPEC, $TORCHVISION_SPEC) (${SECONDS} s since start)"
"${INST[@]}" -c scripts/constraints.txt "$TORCH_SPEC" "$TORCHVISION_SPEC"

echo "[install] 2/5 embeval (editable) with the ROS 2 Kilted wheels and LeRobot (${SECONDS} s since start)"
# pybullet comes from the pybullet-arm64 wheel (pyproject.toml says why); a venv that still has PyPI's pybullet
# distribution (the same module files) drops it first, so that neither one's uninstall can take the other's files.
if "$VENV/bin/python" -c "import importlib.metadata as m; m.version('pybullet')" >/dev/null 2>&1; then
  "${PIP[@]}" uninstall -q -y pybullet pybullet-arm64
fi
"${INST[@]}" -c scripts/constraints.txt -e ".[ros]" -e src/embeval_ros "$LEROBOT_SPEC"

echo "[install] 3/5 ManiSkill3 ($MANISKILL_SPEC) and software Vulkan ($MESA_VULKAN) under $VENV/vulkan (${SECONDS} s since start)"
# Adds about 10 s with warm caches (pip ~9 s for 30 small wheels, apt-get download + dpkg -x < 1 s).
install_maniskill() {
  "${INST[@]}" -c scripts/constraints.txt "$TORCH_SPEC" "$TORCHVISION_SPEC" "$MANISKILL_SPEC" "$SAPIEN_SPEC"
  local dir="$VENV/vulkan" tmp lib
  if [ -f "$dir/.version" ] && [ "$(cat "$dir/.version")" = "$MESA_VULKAN" ] && [ -f "$dir/libvulkan_lvp.so" ]; then
    return 0
  fi
  if ! command -v apt-get >/dev/null || ! grep -q bookworm /etc/os-release 2>/dev/null; then
    echo "[install] WARNING: not Debian 12 (bookworm): no software Vulkan unpacked; ManiSkill needs a Vulkan" \
         "driver (a GPU driver, or Mesa >= 24 lavapipe named in VK_ICD_FILENAMES)" >&2
    return 0
  fi
  tmp=$(mktemp -d)
  # A private apt configuration that adds bookworm-backports for this one download; the system's
  # apt sources and lists stay untouched. Nothing is installed system-wide: dpkg -x only unpacks.
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/x"
  # The Debian mirror this machine already uses (its apt sources), with the backports suite added.
  local mirror
  mirror=$(awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ {print u; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  if [ -z "$mirror" ]; then
    echo "[install] WARNING: no Debian bookworm mirror in /etc/apt sources: software Vulkan for ManiSkill not unpacked" >&2
    rm -rf "$tmp"; return 0
  fi
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-backports main" \
    > "$tmp/sources.list"
  local APT=(apt-get -q -o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o Dir::State::Lists="$tmp/lists" -o Dir::Cache="$tmp/cache" -o APT::Sandbox::User=root)
  "${APT[@]}" update >/dev/null
  (cd "$tmp" && "${APT[@]}" download "$MESA_VULKAN" >/dev/null)
  dpkg -x "$tmp"/mesa-vulkan-drivers_*.deb "$tmp/x"
  mkdir -p "$dir"
  cp "$tmp/x/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so" "$dir/"
  rm -rf "$tmp"
  lib="$(cd "$dir" && pwd -P)/libvulkan_lvp.so"
  # lavapipe links against Debian's libLLVM-15, libdrm, libxcb...: install what is missing.
  if ldd "$lib" | grep -q "not found"; then
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends libllvm15 libdrm2 libelf1 libexpat1 libwayland-client0 libx11-xcb1 \
      libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1 libxcb-xfixes0 libxcb1 libxshmfence1 \
      libzstd1 zlib1g >/dev/null
  fi
  printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s", "api_version": "1.4.305"}}\n' "$lib" \
    > "$dir/lvp_icd.json"
  echo "$MESA_VULKAN" > "$dir/.version"
}
wait_chromium
install_maniskill

# One cv2 (see scripts/constraints.txt): the opencv-python wheel's build is the one that runs. An in-place
# upgrade can leave the cv2 package half overwritten by the other wheel: reinstall the runtime wheel then.
CV_PIN=$(sed -n 's/^opencv-python==\([0-9.]*\).*/\1/p' scripts/constraints.txt)
[ -n "$CV_PIN" ] || { echo "[install] error: scripts/constraints.txt pins no opencv-python==X (the cv2 runtime)" >&2; exit 1; }
if ! "$VENV/bin/python" -c "import cv2, sys; sys.exit(cv2.__version__ != '${CV_PIN%.*}')" 2>/dev/null; then
  echo "[install] reinstalling opencv-python $CV_PIN (import cv2 did not report ${CV_PIN%.*})"
  "${INST[@]}" --reinstall --no-deps "opencv-python==$CV_PIN"
fi

# openpi-client 0.1.2 (openpi's own client; tests use it as the peer's real code) declares numpy<2, which would
# downgrade numpy; its code runs on numpy 2 (tests/core/serving/test_openpi_protocol.py), so it is installed without its deps
# (dm-tree, msgpack, pillow, websockets are main dependencies).
"${INST[@]}" --no-deps "openpi-client==0.1.2"

touch "$PREPARED"
fi

if [ "$LEAVE_BACKGROUND" = 1 ]; then
  left=$(for j in llama libero; do bg_running $j && printf '%s ' $j; done)
  [ -n "$left" ] || exit 0
  echo "[install] steps 1-3 done (${SECONDS} s since start); still running in the background at low priority:" \
       "$left(a plain run of this script waits for them)"
  exit 0
fi

echo "[install] 4/5 llama-cpp-python (portable CPU build, started in the background; cached after the first time) (${SECONDS} s since start)"
if ! has_llama; then
  bg_running llama || build_llama  # the run that prepared the venv left none going (interrupted, or a restart)
  if ! bg_wait llama; then
    echo "[install] error: building llama-cpp-python failed (a run of this script builds it again); the build log" \
         "is $VENV/.llama-build.log:" >&2
    tail -n 30 "$VENV/.llama-build.log" >&2
    exit 1
  fi
  "${INST[@]}" -c scripts/constraints.txt "$WHEELS"/llama/llama_cpp_python-*.whl
fi
rm -rf "$WHEELS"

wait_libero
echo "[install] 5/5 checking the environment (${SECONDS} s since start)"
"$VENV/bin/python" - <<'PY'
import importlib
for mod in ["torch", "torchvision", "pybullet", "ikpy", "rosbags", "pyiqa", "rclpy", "std_msgs.msg",
            "sensor_msgs.msg", "sklearn", "scipy", "embeval", "llama_cpp", "lerobot"]:
    importlib.import_module(mod)
from importlib import metadata  # noqa: E402

import cv2  # noqa: E402

# the cv2 that runs is the opencv-python wheel's (scripts/constraints.txt explains the pair)
runtime = metadata.version("opencv-python")
if not runtime.startswith(cv2.__version__ + "."):
    raise SystemExit(f"[install] error: import cv2 reports {cv2.__version__}, not opencv-python {runtime}: "
                     "remove .venv and run make install again")
from embeval.sim.maniskill.runtime import VulkanUnavailableError, check_vulkan  # noqa: E402

try:  # ManiSkill is one backend among several: a machine without Vulkan still gets everything else
    check_vulkan()
except VulkanUnavailableError as exc:
    print(f"[install] WARNING: the ManiSkill backend will not run here: {exc}")
print("[install] environment OK")
PY


rm -f "$VENV"/.embeval-install-* "$VENV"/.embeval-prepared-*
touch "$STAMP"
echo "[install] done in ${SECONDS} s"
