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
#               LoRA under FSDP2, speed; random-init models (torch + transformers + peft only); a
#               preset whose learner would not fit the GPU by the plan (the 7B ones on an 80 GB H100)
#               is an N/A row saying so, never built
# The machine we get: one H100 (about 78 GiB), torch, transformers, peft, no vLLM, no Ray, no gguf, no
# internet, 15 minutes of device time, at most 8 files back. So the stages run as TWO device calls of
# at most 5 minutes each (--call 1: env, install, sandbox, train; --call 2: env, engine), each started
# with no stage after 270 s and stopped after 285 s (SIGTERM: the table and the logs are written first),
# so that a failed call leaves time to rerun it fixed. What the machine lacks is carried in .gpu_carry/
# (git-ignored: SmolLM2's tokenizer files and the gguf wheel, about 3.6 MiB; the demo model's GGUF,
# 94 MiB, is over the 64 MiB a call carries), written here by --prepare. Each call writes 3 files under
# $OUT: gpu_check.json (every row and number), gpu_check.md (the table), gpu_check-logs.tar.gz (every
# command's log); the table also goes to stdout, progress to stderr.
# Exit status 1 when a row says FAIL, 124 when stopped by the time limit, 2 on bad input.
#   PYTHON=.venv/bin/python scripts/gpu_check.sh --prepare   # here, on a CPU: write .gpu_carry/, its size
#   scripts/gpu_check.sh --dry-run            # the device calls (command, carry, timeout), the stages'
#                                             # commands and the carried files; runs nothing
#   scripts/gpu_check.sh --call 1             # on the GPU machine: the first call, at most 5 minutes
#   scripts/gpu_check.sh --call 2             # the second
#   scripts/gpu_check.sh                      # every stage at once (a machine with 8 minutes for it)
#   scripts/gpu_check.sh --stages engine --only a,e       # some engine checks again
#   scripts/gpu_check.sh --device cpu --tiny --block vllm,ray   # every stage on a CPU, tiny models,
#                                             # vllm and ray made unimportable (the bare machine played)
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"  # deterministic cuBLAS for (e)
python="${PYTHON:-python3}"
stop_s=480
for arg in "$@"; do
    if [ "$arg" = "--dry-run" ] || [ "$arg" = "--prepare" ] || [ "$arg" = "-h" ] || [ "$arg" = "--help" ]; then
        exec "$python" benchmarks/gpu_stages.py "$@"
    fi
    if [ "$arg" = "--call" ] || [ "${arg#--call=}" != "$arg" ]; then
        stop_s=285  # gpu_stages.CALL_STOP_S: within the call's 300 s with the 10 s of SIGKILL grace
    fi
done
exec timeout -k 10 "$stop_s" "$python" benchmarks/gpu_stages.py "$@"
