#!/usr/bin/env bash
# The method comparison (the paper's main table: docs/algorithm.md, "The paper's results"): Code-A1 against the Golden Tests and Self-Play baselines,
# trained for the same number of steps from the same model, data order and seed, then each final
# coder evaluated on the held-out split and HumanEval+ beside the base model.
#
#   export CODEA1_QWEN_MODEL=/path/to/qwen2.5-coder-0.5b-instruct.gguf
#   scripts/method_comparison.sh                       # train, then evaluate, then report
#   STEPS=2 TRAIN_ONLY=1 scripts/method_comparison.sh --engine scripted   # a seconds-long dry run
#
# Environment: EXP_DIR (default runs/methods-<time>), STEPS (default 6), METHODS (default
# "a1 golden selfplay"), PRESET (default qwen-coder-0.5b-cpu), HELDOUT_N (samples per held-out
# problem, default 4), SKIP_HUMANEVAL=1 to evaluate on the held-out split only, TRAIN_ONLY=1 to stop
# after training (the scripted engine's checkpoints are not models to evaluate). Extra arguments go
# to every `codea1 train`. Every phase resumes: rerunning the script skips finished training runs
# and already-checked problems.
set -euo pipefail
exp_dir="${EXP_DIR:-runs/methods-$(date +%Y%m%d-%H%M%S)}"
steps="${STEPS:-6}"
methods="${METHODS:-a1 golden selfplay}"
preset="${PRESET:-qwen-coder-0.5b-cpu}"
heldout_n="${HELDOUT_N:-4}"
train_only="${TRAIN_ONLY:-0}"
base_model="${CODEA1_QWEN_MODEL:-}"
if [[ "$train_only" != 1 && -z "$base_model" ]]; then
    echo "set CODEA1_QWEN_MODEL to the base model (GGUF file or directory), or TRAIN_ONLY=1" >&2
    exit 2
fi
mkdir -p "$exp_dir/eval"
ckpt="step_$(printf %06d "$steps")"  # checkpoint directory name of the last step

for method in $methods; do
    run="$exp_dir/$method"
    if [[ -d "$run/checkpoints/$ckpt" ]]; then
        echo "== $method: step $steps already trained"
    elif [[ -d "$run/checkpoints" ]]; then
        echo "== $method: resuming $run"
        codea1 train --resume "$run" --steps "$steps" "$@"
    else
        echo "== $method -> $run"
        codea1 train --preset "$preset" --method "$method" --steps "$steps" --run-dir "$run" "$@"
    fi
done

if [[ "$train_only" == 1 ]]; then
    codea1 report $(for m in $methods; do echo "$exp_dir/$m"; done) --output "$exp_dir/report"
    exit 0
fi

# One sampling protocol for every model, so before and after differ only by the weights.
eval_code() {  # eval_code MODEL DATA NAME N
    codea1 eval code --model "$1" --data "$2" --n "$4" --temperature 0.7 --top-p 0.95 \
        --max-new-tokens 384 --dtype bfloat16 --device cpu --seed 0 \
        --results-dir "$exp_dir/eval/results" --output "$exp_dir/eval/$3.json"
}
benchmarks="demo:heldout"
[[ "${SKIP_HUMANEVAL:-0}" == 1 ]] || benchmarks="$benchmarks humanevalplus"
for data in $benchmarks; do
    tag="${data//:/-}"
    n=1
    [[ "$data" == demo:heldout ]] && n="$heldout_n"
    echo "== evaluating base on $data"
    eval_code "$base_model" "$data" "$tag-base" "$n"
    for method in $methods; do
        echo "== evaluating $method on $data"
        eval_code "$exp_dir/$method/checkpoints/$ckpt/coder" "$data" "$tag-$method" "$n"
        # the run's eval/ holds before (step 0) and after, so its report plots and tables both
        mkdir -p "$exp_dir/$method/eval"
        cp "$exp_dir/eval/$tag-base.json" "$exp_dir/$method/eval/step_0-$tag.json"
        cp "$exp_dir/eval/$tag-$method.json" "$exp_dir/$method/eval/step_$steps-$tag.json"
    done
    for method in $methods; do
        codea1 eval compare "$exp_dir/eval/$tag-base.json" "$exp_dir/eval/$tag-$method.json" \
            --output "$exp_dir/eval/$tag-$method-vs-base.json"
    done
done

codea1 report $(for m in $methods; do echo "$exp_dir/$m"; done) --output "$exp_dir/report"
echo "done: $exp_dir/report/index.html"
