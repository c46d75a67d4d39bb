#!/usr/bin/env bash
# The GPU check in one call of at most 8 minutes, on an NVIDIA GPU machine that cannot download:
#   bash benchmarks/gpu_check.sh [OUT_DIR]          (default $OUT, else gpu-check)
# onnxruntime-gpu comes from benchmarks/gpu_ort.py (pack here, unpack there: /tmp/ort-gpu/env.sh, or ORT_ENV). It
# says which modules the check needs are missing, installs specdec from this tree (no dependencies, no downloads)
# and runs `specdec-bench gpu --provider cuda` on the bundled pair widened to t5-large : t5-small (fp16 and fp32,
# eager and captured) with a 400 s budget and a 470 s limit, writing in OUT_DIR: gpu-check.md and .json (rewritten
# after every step, so a run cut short keeps what it did), gpu-check.log, and onnxruntime's session log excerpts
# gpu-check-ort-cuda.log and gpu-check-ort-cpu.log. Extra arguments go to specdec-bench gpu (e.g. --budget-s 300).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-check}}
shift || true
mkdir -p "$out"
env_sh=${ORT_ENV:-/tmp/ort-gpu/env.sh}
[ -f "$env_sh" ] && . "$env_sh"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi: not found"
python3 -m benchmarks.need_modules onnxruntime numpy tokenizers torch transformers onnx tqdm safetensors \
    || { echo "the check cannot run here: the modules above are missing"; exit 2; }
. benchmarks/from_tree.sh
specdec_from_tree || { echo "cannot use specdec from this tree"; exit 2; }
timeout 470 python3 -m specdec.bench.cli gpu --provider cuda --widen t5-large:t5-small --dtypes fp16,fp32 \
    --work-dir /tmp/specdec-gpu-work --budget-s 400 --out "$out/gpu-check.md" --json "$out/gpu-check.json" "$@" \
    2>&1 | tee "$out/gpu-check.log"
exit "${PIPESTATUS[0]}"
