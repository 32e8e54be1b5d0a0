#!/usr/bin/env bash
# The tester comparison on held-out problems (issue 47, items 4 and 5): three training seeds each of
# Code-A1, Code-A1 + mutation (D12), Self-Play and two testers aimed at transfer, each one change
# from Code-A1 + mutation: a tester that sees the candidate on half of its prompts (D14,
# tester.whitebox_share=0.5, the mutation term kept) and kills counted across fault kinds (D13,
# reward.mutation_kinds_weight=0.5 in place of reward.mutation_weight). Then every step-STEPS tester
# (and the base model) is evaluated alike on the new held-out split, white-box, one command each
# with the settings of docs/LOG.md's 2026-12-05 tester evaluation, every step-STEPS coder likewise
# (pass@1, n = CODE_N), and `codea1 eval compare` pairs each two methods by problem, a method's
# seeds averaged per problem: mutants killed (mut@k), valid tests (validity) and the coder's pass.
#
#   scripts/tester_comparison.sh                               # the whole comparison (many hours here)
#   STEPS=1 EVERY=1 EVAL_N=2 SEEDS=0 CODE_N=1 EVAL_LIMIT=2 EVAL_MODEL=smollm2-135m \
#       scripts/tester_comparison.sh --engine scripted          # a dry run of the loop
#
# Training goes through scripts/method_comparison.sh (its protocol, its run directories
# EXP_DIR/NAME-sSEED, its resuming, its `codea1 compare` and `codea1 report` of the in-run
# evaluations on demo:easy); extra arguments go to every new `codea1 train`. Environment: EXP_DIR
# (default runs/testers-heldout2), SEEDS (default "0 1 2"), METHODS (default below: LABEL=METHOD[:KEY=
# VALUE,...] entries, the label naming the method in the comparisons), HELDOUT (default
# demo:easy-heldout2), STEPS (default 16), EVERY (in-run evaluation every N steps; default 16: steps 0
# and STEPS only), EVAL_N (in-run coder samples, default 8), CODE_N (coder samples per held-out
# problem, default 8), EVAL_LIMIT (held-out problems evaluated, default 0 = all), PRESET. EVAL_MODEL,
# for dry runs only: evaluate this model in place of every run's checkpoint (a scripted engine's
# checkpoints hold no model the evaluation can load). Rerunning resumes everything: training runs
# continue, an evaluation whose metrics file exists is kept, an interrupted one continues from its
# per-problem results. Start it in the background, never beside the test suite.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exp_dir="${EXP_DIR:-runs/testers-heldout2}"
seeds="${SEEDS:-0 1 2}"
methods="${METHODS:-a1=a1 mutation=a1:reward.mutation_weight=0.5 selfplay=selfplay \
whitebox50=a1:reward.mutation_weight=0.5,tester.whitebox_share=0.5 kinds=a1:reward.mutation_kinds_weight=0.5}"
heldout="${HELDOUT:-demo:easy-heldout2}"
steps="${STEPS:-16}"
every="${EVERY:-16}"
code_n="${CODE_N:-8}"
eval_limit="${EVAL_LIMIT:-0}"
eval_model="${EVAL_MODEL:-}"

labels=()
declare -A spec_of runs_of
runs=""
for entry in $methods; do
    label="${entry%%=*}"
    spec="${entry#*=}"
    IFS=: read -r method variant extra <<<"$spec"
    if [[ "$entry" != *=* || ! "$label" =~ ^[A-Za-z0-9_.+-]+$ || -z "$method" || -n "$extra" ]]; then
        echo "METHODS entry '$entry': expected LABEL=METHOD[:KEY=VALUE,...], e.g. mutation=a1:reward.mutation_weight=0.5" >&2
        exit 2
    fi
    if [[ -n "${spec_of[$label]+set}" ]]; then
        echo "METHODS: the label '$label' is given twice" >&2
        exit 2
    fi
    labels+=("$label")
    spec_of[$label]="$spec"
    name="$method"
    if [[ -n "$variant" ]]; then
        IFS=, read -r -a sets <<<"$variant"
        for kv in "${sets[@]}"; do name="$name-$kv"; done
    fi
    for seed in $seeds; do
        if [[ ! "$seed" =~ ^[0-9]+$ ]]; then
            echo "SEEDS: '$seed' is not a seed (expected numbers, e.g. \"0 1 2\")" >&2
            exit 2
        fi
        runs+=" $method:$seed${variant:+:$variant}"
        runs_of[$label]+=" $exp_dir/$name-s$seed"
    done
done
if [[ ! "$code_n" =~ ^[1-9][0-9]*$ || ! "$eval_limit" =~ ^[0-9]+$ || ! "$steps" =~ ^[1-9][0-9]*$ ]]; then
    echo "CODE_N and STEPS must be numbers >= 1, EVAL_LIMIT a number >= 0" >&2
    exit 2
fi

# 1. Training (resumable), with the in-run comparison and report of method_comparison.sh.
EXP_DIR="$exp_dir" RUNS="$runs" STEPS="$steps" EVERY="$every" bash "$here/method_comparison.sh" "$@"

# 2. The held-out evaluations: every tester white-box and every coder, one command each, alike.
eval_dir="$exp_dir/heldout-eval"
sampling=(--data "$heldout" --limit "$eval_limit" --temperature 0.7 --top-p 0.95 --max-new-tokens 128
    --seed 1000 --dtype float32)  # docs/LOG.md, 2026-12-05, "The testers, evaluated alike"
step_dir="checkpoints/step_$(printf %06d "$steps")"

evaluate() {  # WHAT MODEL OUT_DIR: one `codea1 eval WHAT`, skipped when its metrics file exists
    local what="$1" model="$2" out="$3"
    if [[ -f "$out/metrics.json" ]]; then
        echo "== eval $what $out: done"
        return
    fi
    local args=(--k 4 --max-mutants 30)
    [[ "$what" == code ]] && args=(--n "$code_n")
    echo "== eval $what of $model${eval_model:+ (EVAL_MODEL $eval_model in its place)} -> $out"
    codea1 eval "$what" "${sampling[@]}" "${args[@]}" --model "${eval_model:-$model}" \
        --results-dir "$out" --output "$out/metrics.json"
}

evaluate tests "${eval_model:-smollm2-135m}" "$eval_dir/base/tests"
for label in "${labels[@]}"; do
    for run in ${runs_of[$label]}; do
        ckpt="$run/$step_dir"
        if [[ ! -d "$ckpt" ]]; then
            echo "no checkpoint $ckpt: did its training finish?" >&2
            exit 1
        fi
        tester="$ckpt/tester"
        [[ -d "$tester" ]] || tester="$ckpt/coder"  # Self-Play: one model plays both roles
        evaluate tests "$tester" "$eval_dir/$(basename "$run")/tests"
        evaluate code "$ckpt/coder" "$eval_dir/$(basename "$run")/code"
    done
done

# 3. Each pair of methods, seeds averaged per problem: killed (mut@k), valid (validity), pass (pass@1).
files() {  # LABEL KIND: the metrics files of a method's evaluations
    local run
    for run in ${runs_of[$1]}; do echo "$eval_dir/$(basename "$run")/$2/metrics.json"; done
}
table="$exp_dir/heldout-comparison.txt"
: >"$table"
for metric in killed valid pass; do
    kind=tests
    [[ "$metric" == pass ]] && kind=code
    for ((i = 0; i < ${#labels[@]}; i++)); do
        for ((j = i + 1; j < ${#labels[@]}; j++)); do
            a="${labels[j]}" b="${labels[i]}"  # A (after) is the later entry of METHODS
            mapfile -t after < <(files "$a" "$kind")
            mapfile -t before < <(files "$b" "$kind")
            echo "== $metric: $a (after) vs $b (before)" | tee -a "$table"
            codea1 eval compare --metric "$metric" --before "${before[@]}" --after "${after[@]}" \
                --output "$exp_dir/heldout-compare/$metric-$a-vs-$b.json" | tee -a "$table"
        done
        if [[ "$kind" == tests ]]; then
            mapfile -t after < <(files "${labels[i]}" tests)
            echo "== $metric: ${labels[i]} (after) vs the base model (before)" | tee -a "$table"
            codea1 eval compare --metric "$metric" --before "$eval_dir/base/tests/metrics.json" \
                --after "${after[@]}" --output "$exp_dir/heldout-compare/$metric-${labels[i]}-vs-base.json" |
                tee -a "$table"
        fi
    done
done
echo "done: $table, $exp_dir/heldout-compare/*.json, $exp_dir/comparison.txt (in-run, demo:easy)"
