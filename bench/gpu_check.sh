#!/usr/bin/env bash
# The GPU checks in one call (docs/scale.md, "The GPU check"): run from the repository root on a machine with CUDA
# and PyTorch + transformers installed; writes every figure as JSON (and the profiler tables) under OUT (default
# runs/gpu-check) and prints a summary. Wheels in .whl/ (e.g. num2words for SmolVLM) are installed first if present.
#     OUT=runs/gpu-check bash bench/gpu_check.sh
set -uo pipefail
OUT=${OUT:-runs/gpu-check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/gpu-check-site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/gpu-check-site"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
$PY - <<'PY' | tee "$OUT/versions.json"
import json, platform, torch, transformers
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                  "transformers": transformers.__version__,
                  "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))
PY
t0=$(date +%s)
timeout "${THROUGHPUT_TIMEOUT:-420}" $PY -m bench.gpu_throughput --size 7b --batch 1 8 32 128 --episodes 0 \
  --json "$OUT/gpu_throughput.json" --profile "$OUT" 2>&1 | tee "$OUT/gpu_throughput.log"
echo "gpu_throughput: rc ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout "${FAMILIES_TIMEOUT:-150}" $PY -m bench.gpu_families --device cuda --batch 32 --json "$OUT/gpu_families.json" \
  2>&1 | grep -v "Writing model shards" | tee "$OUT/gpu_families.log"
echo "gpu_families: rc ${PIPESTATUS[0]}, $(( $(date +%s) - t0 )) s"
