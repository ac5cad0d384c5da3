#!/usr/bin/env bash
# dreamgym on a GPU: LocalPolicy decisions/s, LocalBackend synthetic steps/s and seconds per GRPO update
# of a randomly initialised ~0.45B model, each beside the same model's bare generate (benchmarks/gpu_check.py).
#
# For a GPU machine that has torch (CUDA) and transformers but no network:
#   1. where there is network, once:  scripts/gpu_check.sh --fetch wheels/
#      (downloads the other wheels dreamgym imports: small, pure Python or manylinux)
#   2. carry this checkout with wheels/ to the GPU machine, then:  scripts/gpu_check.sh wheels/
# It installs dreamgym without dependencies, the carried wheels without the network, and prints JSON lines
# (also written to $OUT/gpu_check.jsonl when OUT is set). Nothing is downloaded at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
WANTED=(anyio msgspec lmdb usearch rich "trl==1.16.0" peft datasets accelerate)

if [ "${1:-}" = "--fetch" ]; then
  "$PYTHON" -m pip download --only-binary=:all: -d "${2:?give the folder for the wheels}" "${WANTED[@]}"
  exit 0
fi
WHEELS="${1:-wheels}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
"$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
if [ -d "$WHEELS" ]; then
  # torch and transformers stay as the machine has them: --no-deps for dreamgym, --no-index for the rest
  "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" "${WANTED[@]}"
fi
"$PYTHON" -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null || export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
ARGS=(--size "${SIZE:-0.5b}" --device "${DEVICE:-cuda}" --dtype "${DTYPE:-bfloat16}")
if [ -n "${OUT:-}" ]; then
  "$PYTHON" benchmarks/gpu_check.py "${ARGS[@]}" | tee "$OUT/gpu_check.jsonl"
else
  "$PYTHON" benchmarks/gpu_check.py "${ARGS[@]}"
fi
