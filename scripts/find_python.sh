#!/usr/bin/env bash
# Print the path of a Python interpreter of the version embeval's main environment needs (3.12: LeRobot >= 0.5
# requires it; 3.13 lacks a wheel of ur-rtde, see scripts/constraints.txt). Looked for in this order:
# $PYTHON if set, python3.12 on PATH, python3 on PATH if it is 3.12, pyenv's versions, uv's managed Pythons.
# None found: one line on stderr naming the version and how to get it, exit status 1.
set -uo pipefail
WANT="${EMBEVAL_PYTHON_VERSION:-3.12}"

is_wanted() {  # is_wanted PATH: PATH runs and reports Python $WANT
  [ -x "$1" ] || command -v "$1" >/dev/null 2>&1 || return 1
  [ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$WANT" ]
}

if [ -n "${PYTHON:-}" ]; then
  if is_wanted "$PYTHON"; then command -v "$PYTHON"; exit 0; fi
  echo "[install] error: PYTHON=$PYTHON is not Python $WANT; unset PYTHON or point it to a python$WANT" >&2
  exit 1
fi
candidates=("python$WANT" python3)
for root in "${PYENV_ROOT:-$HOME/.pyenv}/versions" "$HOME/.local/share/uv/python" "${UV_PYTHON_INSTALL_DIR:-/nonexistent}"; do
  for dir in $(ls -d "$root/$WANT".* "$root"/cpython-"$WANT".*-linux-* 2>/dev/null | sort -V -r); do
    candidates+=("$dir/bin/python$WANT")
  done
done
for c in "${candidates[@]}"; do
  if is_wanted "$c"; then command -v "$c"; exit 0; fi
done
echo "[install] error: ${EMBEVAL_PYTHON_FOR:-embeval} needs Python $WANT and found none (looked on PATH, in pyenv and uv's Pythons):" \
     "install it (uv python install $WANT, pyenv install $WANT, or apt-get install python$WANT-venv)," \
     "or set PYTHON=/path/to/python$WANT" >&2
exit 1
