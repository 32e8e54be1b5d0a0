#!/usr/bin/env bash
# The method comparison (the paper's main table: docs/algorithm.md, "The paper's results") with the
# protocol of docs/LOG.md's "Code-A1 on easy problems, second run": SmolLM2-135M (preset tiny-cpu)
# trained 16 steps on the 12 problems of demo:easy-train, each run evaluating itself on demo:easy
# (those 12 and the 9 held-out problems of demo:easy-heldout) at steps 0, 8 and 16, 8 samples per
# problem, with the same seeds. Then `codea1 compare` pairs the methods by problem at the last point,
# on the training and the held-out problems separately, and `codea1 report` draws the curves.
#
#   scripts/method_comparison.sh                                       # a1, golden, selfplay (~1 h each here)
#   RUNS="a1:0 a1:1 golden:0 selfplay:0" scripts/method_comparison.sh  # two training seeds of a1
#   RUNS="a1:0 a1:0:reward.alpha=1.0" scripts/method_comparison.sh     # a variant: --set values after the seed
#   STEPS=1 EVERY=1 EVAL_N=2 scripts/method_comparison.sh --engine scripted   # a dry run of the loop
#
# Environment: EXP_DIR (default runs/methods-easy), RUNS (default "a1:0 golden:0 selfplay:0"; each
# entry METHOD:SEED[:KEY=VALUE,KEY=VALUE...] is one run, in EXP_DIR/METHOD[-KEY=VALUE...]-sSEED),
# PRESET (default tiny-cpu), STEPS (default 16), EVERY (default 8), EVAL_N (default 8). Extra arguments
# go to every new `codea1 train`. Rerunning resumes: a run directory that exists is continued with
# `codea1 train --resume RUN` and its saved configuration (a finished run says so and is left as it
# is), so an interrupted script picks up where it stopped; start it in the background, never beside
# the test suite.
set -euo pipefail
exp_dir="${EXP_DIR:-runs/methods-easy}"
runs="${RUNS:-a1:0 golden:0 selfplay:0}"
preset="${PRESET:-tiny-cpu}"
steps="${STEPS:-16}"
every="${EVERY:-8}"
eval_n="${EVAL_N:-8}"
mkdir -p "$exp_dir"

protocol=(  # docs/LOG.md, 2026-12-02, "Code-A1 on easy problems, second run"
    --set engine.dtype=float32 --set data.train=demo:easy-train --set data.problems_per_step=2
    --set coder.sampling.n=4 --set coder.sampling.max_new_tokens=128
    --set coder.sampling.temperature=0.7 --set coder.sampling.top_p=0.95
    --set tester.sampling.n=2 --set tester.update_n=2 --set tester.sampling.max_new_tokens=128
    --set tester.sampling.temperature=0.7 --set tester.sampling.top_p=0.95
    --set coder.optim.lr=2e-5 --set tester.optim.lr=5e-5
    --set coder.optim.skip_without_signal=true --set tester.optim.skip_without_signal=true
    --set train.save_every=1 --set train.keep_last=1
    --set eval.data=demo:easy --set eval.n="$eval_n" --set eval.max_new_tokens=128 --set eval.tests=4
    --set eval.every="$every" --set eval.seed=1000
)

dirs=()
for entry in $runs; do
    IFS=: read -r method seed variant <<<"$entry"
    if [[ -z "$method" || ! "$seed" =~ ^[0-9]+$ ]]; then
        echo "RUNS entry '$entry': expected METHOD:SEED[:KEY=VALUE,...], e.g. a1:0" >&2
        exit 2
    fi
    extra=()
    name="$method"
    if [[ -n "$variant" ]]; then
        IFS=, read -r -a sets <<<"$variant"
        for kv in "${sets[@]}"; do
            extra+=(--set "$kv")
            name="$name-$kv"
        done
    fi
    run="$exp_dir/$name-s$seed"
    dirs+=("$run")
    if [[ -f "$run/config.yaml" ]]; then
        echo "== $name seed $seed: resuming $run"
        codea1 train --resume "$run"  # its config.yaml holds every setting, extra arguments included
    else
        echo "== $name seed $seed -> $run"
        codea1 train --preset "$preset" --method "$method" --steps "$steps" --run-dir "$run" \
            --set train.seed="$seed" "${protocol[@]}" "${extra[@]}" "$@"
    fi
done

codea1 compare "${dirs[@]}" --output "$exp_dir/comparison.json" | tee "$exp_dir/comparison.txt"
codea1 report "${dirs[@]}" --output "$exp_dir/report"
echo "done: $exp_dir/comparison.txt, $exp_dir/report/index.html"
