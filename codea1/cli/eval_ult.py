"""``codea1 eval tests --protocol iterative``: UnLeakedTestBench's K-query protocol and metrics.

``--protocol auto`` (the default) runs it for ULT data (``--data ult:PATH``, or a file in ULT's
format) and today's one-suite protocol otherwise. The suites come from a Test LLM (``--model``,
asked for one test per round, ``eval.ult_sampling``), a tests file (``--tests``, its first k tests)
or the data's own example tests (``--example-tests``: ULT's ``test_list`` scored as if a tester had
written it). The loop, the results file and resuming are ``eval.runner``'s, as for every verb.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codea1.cli import CliError
from codea1.cli.eval_args import per_chunk, run_options, sampler_settings, sampling

PROTOCOLS = ("auto", "suite", "iterative")
MUTANT_CHOICES = ("auto", "cosmic-ray", "ast")


def add_iterative_options(tests: argparse.ArgumentParser) -> None:
    """The options of ``eval tests`` that choose and feed the protocol."""
    tests.add_argument(
        "--protocol", choices=PROTOCOLS, default="auto",
        help="suite: one suite of k tests per problem (validity, pass@k, mut@k, coverage); iterative: "
        "UnLeakedTestBench's K-query task, one new test per round (pass@k, LCov@k, BCov@k, mut@k, Mul); "
        "auto: iterative for ULT data (ult:PATH), suite otherwise",
    )  # fmt: skip
    tests.add_argument(
        "--mutants", choices=MUTANT_CHOICES, default="auto",
        help="iterative protocol: mutants from Cosmic-Ray's operators (auto) or codea1's AST mutator",
    )  # fmt: skip
    tests.add_argument(
        "--example-tests", action="store_true",
        help="iterative protocol: score the data's own example tests (ULT's test_list) as the suite",
    )  # fmt: skip


def _is_ult_file(spec: str) -> bool:
    from codea1.data.files import read_raw
    from codea1.data.loaders.ult import COLUMNS
    from codea1.data.rows import DataError

    path = Path(spec).expanduser()
    if not (path.is_file() and path.name.lower().endswith((".json", ".jsonl"))):
        return False
    try:
        rows = read_raw(path)
    except (DataError, OSError):
        return False
    return any(obj is not None and COLUMNS <= set(obj) for _, obj, _ in rows[:5])


def iterative(args: argparse.Namespace) -> bool:
    """Whether ``eval tests`` runs the K-query protocol for these arguments."""
    protocol = getattr(args, "protocol", "suite")
    if protocol == "auto":
        spec = str(args.data).strip()
        return spec.startswith("ult:") or _is_ult_file(spec)
    return protocol == "iterative"


def run_iterative_tests(
    args: argparse.Namespace, say: Callable[[str], None], finish: Callable[..., int]
) -> int:
    """``eval tests`` under the K-query protocol (``finish`` prints and writes the metrics)."""
    from codea1.eval import runner
    from codea1.eval.cosmic_mutants import MutantsUnavailable, operator_names
    from codea1.eval.ult_eval import iterative_checker, summarize_iterative
    from codea1.eval.ult_sampling import example_suites, sample_iterative

    if sum(map(bool, (args.model, args.tests, args.example_tests))) != 1:
        raise CliError("give exactly one of --model, --tests or --example-tests")
    if args.coder or args.code_samples or args.blackbox:
        raise CliError("--coder, --code-samples and --blackbox belong to --protocol suite")
    mutant_source = "cosmic-ray" if args.mutants == "auto" else args.mutants
    if mutant_source == "cosmic-ray":
        try:
            operator_names()
        except MutantsUnavailable as e:
            raise CliError(str(e)) from None
    from codea1.cli.eval_args import check_options

    check_options(args, ["--tests"])
    problems, given = runner.given_inputs(
        runner.load_benchmark(args.data, args.limit, say), tests=args.tests, say=say
    )
    if args.example_tests:
        given.suites = example_suites(problems)
        model_id = "example-tests"
    else:
        model_id = args.model or runner.file_id(args.tests)
    settings: dict[str, Any] = {"k": args.k, "protocol": "iterative", "mutants": args.max_mutants,
                                "mutant_source": mutant_source}  # fmt: skip
    if args.model:
        settings.update(sampler_settings(args, 1))

    def prepare() -> runner.CheckChunk:
        suites = per_chunk(args.model, args, given.suites, sample_iterative, sampling(args, 1), args.k)
        return iterative_checker(suites, k=args.k, max_mutants=args.max_mutants, mutant_source=mutant_source)

    records, path = runner.run_resumable(
        problems, "tests", model_id, settings, run_options(args), prepare, say
    )
    for r in records:
        if r.get("unavailable"):
            say(f"not scored: {r['id']} needs {', '.join(r['unavailable'])}, which the sandbox cannot import")
    title = f"test generation, K-query protocol ({model_id}, k={args.k}, mutants {mutant_source})"
    return finish(summarize_iterative(records, args.k), title, args.output, {"results": str(path.resolve())})
