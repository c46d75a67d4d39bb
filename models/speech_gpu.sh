#!/usr/bin/env bash
# The speech pair trained in one call of a GPU machine that cannot download (models/README.md, "Training the speech
# pair on a GPU machine"):
#   bash models/speech_gpu.sh [OUT_DIR] [specdec-models options]      (OUT_DIR default $OUT, else speech-gpu)
# Installs the wheels that travelled in .whl/ (espeak-ng's espeakng-loader) into /tmp/speech-site, says which modules
# are missing, installs specdec from this tree (no dependencies, no downloads) and runs `specdec-models speech-gpu`
# with a 480 s budget under a 520 s limit. OUT_DIR gets speech-gpu.json (the record, rewritten after every step, so a
# run cut short keeps what it did), speech-pack.tar.NN (the pack in pieces) and speech-gpu.log. Run it again on the
# same machine to go on training (it resumes); extra arguments go to specdec-models (e.g. --budget-s 300).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-speech-gpu}}
shift || true
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi: not found"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/speech-site \
        .whl/*.whl || { echo "cannot install the wheels in .whl/"; exit 2; }
    export PYTHONPATH=/tmp/speech-site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m benchmarks.need_modules torch transformers tokenizers safetensors numpy scipy onnxruntime espeakng_loader \
    || { echo "the run cannot start here: the modules above are missing"; exit 2; }
. benchmarks/from_tree.sh
specdec_from_tree || { echo "cannot use specdec from this tree"; exit 2; }
timeout 520 python3 -m specdec.models.recipe speech-gpu --out "$out" --budget-s 480 "$@" 2>&1 | tee "$out/speech-gpu.log"
exit "${PIPESTATUS[0]}"
