#!/usr/bin/env bash
# One-GPU check of the engine (benchmarks/gpu_check.py; its docstring says what each row means): the
# Ray learner's own build at world size 1 over NCCL against an fp32 one-process step, shared-prompt
# rows vs one row per sequence, each paper preset's worst micro-batch memory vs the memory plan, the
# weight sync's cost, a DCP save/load round trip, the caching allocator after a step, LoRA adapters
# under FSDP2, and rollout/update speed. Random-init models (no weights, no tokenizer, no downloads;
# torch + transformers + peft, no vLLM or Ray).
# Run from anywhere on a machine with one CUDA GPU: about 4 minutes on an H200, stopped after 8
# (no check starts after 440 s; rows print as checks end). The markdown table goes to stdout,
# gpu_check.json to $OUT when set; exit status 1 when a row says FAIL. Extra arguments go to the
# script, e.g.
#   scripts/gpu_check.sh                      # CUDA: every check
#   scripts/gpu_check.sh --tiny               # a tiny model on the GPU, about a minute (smoke run)
#   scripts/gpu_check.sh --only a,e           # some checks again
#   scripts/gpu_check.sh --tiny --device cpu  # every check on a CPU, about a minute (what CI runs)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"  # deterministic cuBLAS for (e)
python="${PYTHON:-python3}"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
"$python" -c 'import torch, transformers, peft; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, transformers {transformers.__version__}, peft {peft.__version__}")'
exec timeout -k 10 480 "$python" benchmarks/gpu_check.py "$@"
