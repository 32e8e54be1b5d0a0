#!/usr/bin/env bash
# The check to run on a lent GPU machine (benchmarks/gpu_stages.py; its docstring says what each stage
# does, benchmarks/gpu_check.py's what each engine check means). Stages, in order:
#   env         the GPU, versions, which of vllm / ray / gguf import                      (info)
#   install     pip install --no-deps --no-build-isolation of codea1 and the carried gguf wheel
#   sandbox     codea1 sandbox doctor and selftest (the isolation this machine gives)
#   train       codea1 train --preset paper-1.5b, 2 steps on CUDA, transformers engine, random-init
#               SmolLM2-135M-shaped model, memory/peak_gpu_gib per step vs the memory plan
#   train-vllm  the same with vLLM rollouts            (needs vllm: SKIP with the reason where absent)
#   train-ray   the same on the Ray backend            (needs ray and vllm: SKIP where absent)
#   engine      benchmarks/gpu_check.py: learner build, shared rows, memory plan, sync, DCP, allocator,
#               LoRA under FSDP2, speed; random-init models (torch + transformers + peft only)
# The bare-H200 path (torch, transformers, peft, no vLLM, no Ray, no gguf, no internet) is every stage:
# the vLLM and Ray ones report SKIP there. What that machine lacks is carried in .gpu_carry/
# (git-ignored, about 3.6 MiB: SmolLM2's tokenizer files and the gguf wheel), written on a CPU machine
# with the demo model installed by --prepare. No stage starts after 450 s; the whole script is stopped
# at 480 s (8 minutes). One markdown table goes to stdout at the end (progress and each stage's output
# to stderr); with $OUT set, $OUT/gpu_check.json (every row and number), gpu_check.md and logs/.
# Exit status 1 when a row says FAIL, 2 on bad input.
#   PYTHON=.venv/bin/python scripts/gpu_check.sh --prepare   # here, on a CPU: write .gpu_carry/
#   scripts/gpu_check.sh --dry-run            # print the stages' commands and the carried files
#   scripts/gpu_check.sh                      # on the GPU machine: every stage, about 7 minutes
#   scripts/gpu_check.sh --stages install,sandbox,train   # the bare-GPU train alone, about 2 minutes
#   scripts/gpu_check.sh --stages engine --only a,e       # some engine checks again
#   scripts/gpu_check.sh --device cpu --tiny --block vllm,ray   # every stage on a CPU, tiny models,
#                                             # vllm and ray made unimportable (the bare machine played)
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"  # deterministic cuBLAS for (e)
python="${PYTHON:-python3}"
for arg in "$@"; do
    if [ "$arg" = "--dry-run" ] || [ "$arg" = "--prepare" ] || [ "$arg" = "-h" ] || [ "$arg" = "--help" ]; then
        exec "$python" benchmarks/gpu_stages.py "$@"
    fi
done
exec timeout -k 10 480 "$python" benchmarks/gpu_stages.py "$@"
