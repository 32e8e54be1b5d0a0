#!/usr/bin/env bash
# The alpha ablation (docs/algorithm.md, "The paper's results"): one run per weight of validity vs adversarial failure in the
# Test-LLM reward, each in its own run directory. Extra arguments go to every run, e.g.
#   scripts/alpha_sweep.sh --preset qwen-coder-0.5b-cpu --steps 20
#   scripts/alpha_sweep.sh --engine scripted --steps 2          # a seconds-long dry run
# Environment: SWEEP_DIR (default runs/alpha-sweep-<time>), ALPHAS (default "0 0.25 0.5 0.75 1").
set -euo pipefail
sweep_dir="${SWEEP_DIR:-runs/alpha-sweep-$(date +%Y%m%d-%H%M%S)}"
alphas="${ALPHAS:-0 0.25 0.5 0.75 1}"
mkdir -p "$sweep_dir"
for alpha in $alphas; do
    echo "== alpha $alpha -> $sweep_dir/alpha-$alpha"
    codea1 train --alpha "$alpha" --run-dir "$sweep_dir/alpha-$alpha" "$@"
done
echo "runs in $sweep_dir; compare with: codea1 report $sweep_dir/alpha-*"
