"""``codea1 eval``: the verbs that evaluate a model or its outputs: code generation (avg@k, pass@k),
test generation (ULT metrics), best-of-N collaboration and BigCodeBench. Models are loaded lazily
through ``engine.hf_local.load_policy``; ``code``, ``tests`` and ``bon`` also accept files of
completions so they run without a model.

The command is three modules, one job each: this one runs the evaluating verbs (the loop they share
is ``codea1.eval.runner``); ``cli.eval_args`` holds every verb's parser, the checks of the values
before anything is read or created, and what the values stand for (run options, sampling settings,
models); ``cli.eval_compare`` is ``eval compare``, which evaluates nothing: it compares two
evaluations already written.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codea1.cli import CliError
from codea1.cli.eval_args import (
    add_parsers,
    check_bigcodebench_options,
    check_options,
    load_model,
    per_chunk,
    run_options,
    sampler_settings,
    sampling,
)
from codea1.cli.eval_compare import run_compare
from codea1.cli.eval_ult import add_iterative_options, iterative, run_iterative_tests
from codea1.cli.outputs import write_output
from codea1.core.estimators import ks_for
from codea1.engine.base import PromptTooLong
from codea1.eval import runner
from codea1.eval.tables import format_table


def register(subparsers: Any) -> None:
    """Add ``eval code|tests|bon|compare|bigcodebench`` (``compare`` lives in ``cli.eval_compare``)."""
    verbs = {"code": run_code, "tests": run_tests, "bon": run_bon, "compare": run_compare}
    for name, parser in add_parsers(subparsers).items():
        parser.set_defaults(func=verbs.get(name, run_bigcodebench))
        if name == "tests":
            add_iterative_options(parser)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _user_errors(verb: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``verb`` with the runner's expected failures as one :class:`CliError` line each."""

    @functools.wraps(verb)
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return verb(args)
        except runner.ResultsFileError as e:
            raise CliError(f"{e} (use another --results-dir)") from None
        except (runner.EvalInputError, PromptTooLong) as e:
            raise CliError(str(e)) from None

    return wrapped


def _finish(metrics: dict, title: str, output: Path | None, extra: dict[str, Any] | None = None) -> int:
    """Print the table; write ``metrics`` (plus ``extra`` top-level fields) to ``output`` if given."""
    print(format_table(metrics, title))
    if output is not None:
        write_output(output, json.dumps({**metrics, **(extra or {})}, indent=2) + "\n", make_parents=True)
        _say(f"wrote {output}")
    return 0


@_user_errors
def run_code(args: argparse.Namespace) -> int:
    """``codea1 eval code``."""
    from codea1.eval.code_eval import code_checker, sample_completions, summarize_code
    from codea1.eval.inputs import no_code_warning

    if bool(args.model) == bool(args.samples):
        raise CliError("give exactly one of --model or --samples")
    check_options(args, ["--samples"])
    problems, given = runner.given_inputs(
        runner.load_benchmark(args.data, args.limit, _say), samples=args.samples,
        samples_format=args.samples_format, say=_say,
    )  # fmt: skip
    settings: dict[str, Any] = {}
    if args.samples:
        n = min(len(given.codes[p.id]) for p in problems)
        model_id = f"{runner.file_id(args.samples)}:{given.samples_format}"
    else:
        n, model_id = args.n, args.model
        settings = sampler_settings(args, n)
    if n < 1:
        raise CliError("need at least one sample per problem")
    runner.require_harness(problems, "eval code checks every sample with it")

    def prepare() -> runner.CheckChunk:
        return code_checker(per_chunk(args.model, args, given.codes, sample_completions, sampling(args, n)))

    records, path = runner.run_resumable(
        problems, "code", model_id, settings, run_options(args), prepare, _say
    )
    if args.samples and (warning := no_code_warning(records, args.samples_format)):
        _say(warning)
    # the per-problem file rides along for `eval compare` and the report's deltas
    results = {"results": str(path.resolve())}
    title = f"code generation ({model_id}, n={n})"
    return _finish(summarize_code(records, ks_for(n)), title, args.output, results)


@_user_errors
def run_tests(args: argparse.Namespace) -> int:
    """``codea1 eval tests``."""
    from codea1.eval.code_eval import sample_completions
    from codea1.eval.suite_eval import sample_suites, suites_checker, summarize_tests

    if iterative(args):  # UnLeakedTestBench's K-query protocol (cli.eval_ult)
        return run_iterative_tests(args, _say, _finish)
    if args.example_tests:
        raise CliError("--example-tests belongs to --protocol iterative")
    if bool(args.model) == bool(args.tests):
        raise CliError("give exactly one of --model or --tests")
    if args.coder and args.code_samples:
        raise CliError("give at most one of --coder or --code-samples")
    check_options(args, ["--tests", "--code-samples"])
    problems, given = runner.given_inputs(
        runner.load_benchmark(args.data, args.limit, _say), tests=args.tests, say=_say
    )
    code_files: dict[str, Any] = {}
    if args.code_samples:
        code_files = runner.read_samples(args.code_samples, problems, args.samples_format, _say)[0]
    if args.coder or args.code_samples:
        runner.require_harness(problems, "defect detection checks the code samples with it")
    coder_id = args.coder or (runner.file_id(args.code_samples) if args.code_samples else "")
    settings: dict[str, Any] = {"k": args.k, "blackbox": args.blackbox, "mutants": args.max_mutants,
                                "coder": coder_id}  # fmt: skip
    if args.model:  # how the suites were sampled
        settings.update(sampler_settings(args, 1))
    if args.coder:  # how the code was sampled
        settings["coder_sampling"] = sampler_settings(args, args.n)
    view = "blackbox" if args.blackbox else "whitebox"

    def prepare() -> runner.CheckChunk:
        suites = per_chunk(args.model, args, given.suites, sample_suites, sampling(args, 1), args.k, view)
        codes = per_chunk(args.coder, args, code_files, sample_completions, sampling(args, args.n))
        wrong = codes if args.coder or code_files else None
        return suites_checker(suites, wrong, k=args.k, max_mutants=args.max_mutants)

    model_id = args.model or runner.file_id(args.tests)
    records, path = runner.run_resumable(
        problems, "tests", model_id, settings, run_options(args), prepare, _say
    )
    title = f"test generation ({model_id}, k={args.k})"
    return _finish(summarize_tests(records, args.k), title, args.output, {"results": str(path.resolve())})


@_user_errors
def run_bon(args: argparse.Namespace) -> int:
    """``codea1 eval bon``."""
    from codea1.eval.bon import bon_checker, sample_blackbox_suites, summarize_bon
    from codea1.eval.code_eval import sample_completions

    if bool(args.coder) == bool(args.samples) or bool(args.tester) == bool(args.tests):
        raise CliError("give one of --coder/--samples and one of --tester/--tests")
    check_options(args, ["--samples", "--tests"])
    problems, given = runner.given_inputs(
        runner.load_benchmark(args.data, args.limit, _say), samples=args.samples, tests=args.tests,
        samples_format=args.samples_format, say=_say,
    )  # fmt: skip
    runner.require_harness(problems, "best-of-N scores the chosen samples with it")
    model_id = f"{args.coder or runner.file_id(args.samples)}+{args.tester or runner.file_id(args.tests)}"

    def prepare() -> runner.CheckChunk:
        return bon_checker(
            per_chunk(args.coder, args, given.codes, sample_completions, sampling(args, args.n)),
            per_chunk(
                args.tester,
                args,
                given.suites,
                sample_blackbox_suites,
                sampling(args, args.m),
                args.tests_per_suite,
            ),
        )

    settings: dict[str, Any] = {"n": args.n, "m": args.m}
    if args.coder:
        settings["coder_sampling"] = sampler_settings(args, args.n)
    if args.tester:
        settings["tester_sampling"] = sampler_settings(args, args.m)
    records, _ = runner.run_resumable(problems, "bon", model_id, settings, run_options(args), prepare, _say)
    return _finish(summarize_bon(records), f"best-of-N ({model_id})", args.output)


def run_bigcodebench(args: argparse.Namespace) -> int:
    """``codea1 eval bigcodebench``: sample with our policy, score with the bigcodebench package."""
    from codea1.eval.bigcodebench import (
        BigCodeBenchUnavailable,
        evaluate_samples,
        generate_samples,
        load_tasks,
    )

    check_bigcodebench_options(args)
    try:
        tasks = load_tasks(args.split, args.subset)
        policy = load_model(args.model, args)
        out = args.out_dir / f"{args.split}-{args.subset}-n{args.n}.jsonl"
        generate_samples(policy, tasks, sampling(args, args.n), args.split, out)
        return evaluate_samples(out, args.split, args.subset, ",".join(str(k) for k in ks_for(args.n)))
    except BigCodeBenchUnavailable as e:
        raise CliError(str(e)) from None
