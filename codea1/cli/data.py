"""``codea1 data validate|inspect PATH_OR_NAME``: check a problem set and show its prompts
(``data screen``, the pass-rate band of a model, lives in :mod:`codea1.cli.screen`).

``validate`` prints the counts per source, a warning per unknown column (with the nearest known
name) and every invalid row with its reason; ``inspect`` adds
one problem rendered as the coder, white-box tester and black-box tester prompts (plain text, since
no tokenizer is loaded). Both exit with 1 when any row is invalid.
"""

from __future__ import annotations

import argparse
import warnings

from codea1.cli import CliError, screen
from codea1.data.problems import (
    DataError,
    DataWarning,
    ValidationReport,
    load_problems,
    validate_problems,
)
from codea1.data.prompts import as_plain_text, coder_messages, tester_messages
from codea1.limits import MAX_TESTS_PER_SUITE

MAX_LISTED = 50
"""Invalid rows printed in full; the rest are counted."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``data validate`` and ``data inspect``."""
    parser = subparsers.add_parser("data", help="check problem sets and show their prompts")
    verbs = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    spec_help = (
        "demo, demo:train, demo:heldout, humanevalplus, mbppplus, evalplus, humaneval, kodcode, or a file"
    )

    validate = verbs.add_parser("validate", help="count problems per source and list invalid rows")
    validate.add_argument("spec", metavar="PATH_OR_NAME", help=spec_help)
    validate.add_argument("--limit", type=int, default=0, help="check only the first N problems (0 = all)")
    validate.set_defaults(func=run_validate)

    inspect = verbs.add_parser("inspect", help="validate, then show one problem and its prompts")
    inspect.add_argument("spec", metavar="PATH_OR_NAME", help=spec_help)
    inspect.add_argument("--index", type=int, default=0, help="which problem to show (default: the first)")
    inspect.add_argument("--id", dest="problem_id", default="", help="show the problem with this id instead")
    inspect.add_argument("--n-tests", type=int, default=8, help="asserts the tester prompt asks for")
    inspect.add_argument("--limit", type=int, default=0, help="check only the first N problems (0 = all)")
    screen.add_parser(verbs)
    inspect.set_defaults(func=run_inspect)


def _report(spec: str, limit: int) -> ValidationReport:
    if limit < 0:
        raise CliError(f"--limit must be >= 0 (0 = all), got {limit}")
    try:
        report = validate_problems(spec, limit=limit)
    except DataError as e:
        raise CliError(str(e)) from None
    for note in report.warnings:
        print(f"warning: {note}")
    for row in report.invalid[:MAX_LISTED]:
        print(f"invalid: {row}")
    if len(report.invalid) > MAX_LISTED:
        print(f"... and {len(report.invalid) - MAX_LISTED} more invalid rows")
    print(report.summary())
    return report


def run_validate(args: argparse.Namespace) -> int:
    """Print the report; exit code 1 when any row is invalid."""
    return 0 if _report(args.spec, args.limit).ok else 1


def run_inspect(args: argparse.Namespace) -> int:
    """Print the report and one problem rendered as the three prompts."""
    if not 1 <= args.n_tests <= MAX_TESTS_PER_SUITE:
        raise CliError(f"--n-tests must be in [1, {MAX_TESTS_PER_SUITE}], got {args.n_tests}")
    report = _report(args.spec, args.limit)
    if not report.ok:
        return 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # the report above printed them already
        problems = load_problems(args.spec, limit=args.limit)
    if not problems:
        raise CliError(f"{args.spec}: no problems")
    if args.problem_id:
        chosen = [p for p in problems if p.id == args.problem_id]
        if not chosen:
            raise CliError(f"{args.spec}: no problem with id {args.problem_id!r}")
        problem = chosen[0]
    elif 0 <= args.index < len(problems):
        problem = problems[args.index]
    else:
        raise CliError(f"--index {args.index} is out of range (0..{len(problems) - 1})")
    meta = f", metadata {problem.metadata}" if problem.metadata else ""
    print(
        f"\n=== problem {problem.id} (source {problem.source or '-'}, entry point {problem.entry_point}{meta})"
    )
    print(f"golden tests: {len(problem.golden_tests)}, harness: {'yes' if problem.harness else 'no'}")
    sections = [
        ("coder prompt", coder_messages(problem)),
        (
            "tester prompt, white-box (the reference as the code under test)",
            tester_messages(problem, problem.reference, n_tests=args.n_tests, view="whitebox"),
        ),
        ("tester prompt, black-box", tester_messages(problem, None, n_tests=args.n_tests, view="blackbox")),
    ]
    for title, messages in sections:
        print(f"\n=== {title}\n{as_plain_text(messages)}")
    return 0
