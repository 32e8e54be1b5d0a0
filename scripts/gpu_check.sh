#!/usr/bin/env bash
# One-GPU check of the engine at the paper-1.5b size (benchmarks/gpu_check.py): rollout and update
# tokens/s, peak memory, and one FSDP2 world-size-1 update against a one-process update, on a
# random-init model (no weights, no tokenizer, no downloads; torch + transformers, no vLLM or Ray).
# Run from anywhere on a machine with one CUDA GPU; a few minutes (stopped after 8). The table goes
# to stdout, gpu_check.json to $OUT when set. Extra arguments go to the script, e.g.
#   scripts/gpu_check.sh                      # CUDA, the paper-1.5b architecture
#   scripts/gpu_check.sh --tiny --device cpu  # seconds, on a CPU (what CI runs)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python="${PYTHON:-python3}"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
"$python" -c 'import torch, transformers; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, transformers {transformers.__version__}")'
exec timeout 480 "$python" benchmarks/gpu_check.py "$@"
