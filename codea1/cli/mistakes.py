"""``codea1 mistakes inspect|export``: look inside a run's Mistake Book, or dump it to JSONL."""

from __future__ import annotations

import argparse
from pathlib import Path

from codea1.cli import CliError
from codea1.replay.mistake_book import DEFAULT_FILENAME, MistakeBook


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``mistakes`` subcommand and its ``inspect`` / ``export`` actions."""
    parser = subparsers.add_parser(
        "mistakes",
        help="inspect or export a Mistake Book (tests that broke code, replayed in training)",
        description="Inspect or export the Mistake Book of a run (RUN_DIR/mistake_book.sqlite).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    inspect = actions.add_parser("inspect", help="size, top problems and sample entries")
    inspect.add_argument("target", type=Path, metavar="RUN_DIR_OR_DB", help="run directory or .sqlite file")
    inspect.add_argument("--top", type=int, default=10, metavar="N", help="problems to list (default 10)")
    inspect.add_argument(
        "--samples", type=int, default=3, metavar="N", help="entries shown per listed problem (default 3)"
    )
    inspect.set_defaults(func=run_inspect)
    export = actions.add_parser("export", help="write every entry as one JSON line")
    export.add_argument("target", type=Path, metavar="DB", help="run directory or .sqlite file")
    export.add_argument("--output", "-o", type=Path, required=True, metavar="FILE.jsonl", help="output file")
    export.set_defaults(func=run_export)


def resolve_db(target: Path) -> Path:
    """The database file named by a run directory or a path; an error if it does not exist."""
    path = target / DEFAULT_FILENAME if target.is_dir() else target
    if not path.is_file():
        raise CliError(f"no Mistake Book at {path}")
    return path


def run_inspect(args: argparse.Namespace) -> int:
    """Print the book's size, last step, the problems with the most weight, and sample entries."""
    path = resolve_db(args.target)
    with MistakeBook(path) as book:
        problems = book.problem_sizes()
        print(f"mistake book: {path}")
        print(f"last step: {book.last_step if book.last_step is not None else 'none'}")
        print(f"entries: {book.size()} across {len(problems)} problem(s)")
        if not problems:
            return 0
        print(f"\n{'problem':<40} {'entries':>8} {'total freq':>10}")
        for pid, n, total in problems[: args.top]:
            print(f"{pid:<40} {n:>8} {total:>10}")
        print("\nsample entries (highest frequency first):")
        for pid, _, _ in problems[: args.top]:
            for e in book.entries(pid)[: args.samples]:
                print(
                    f"  [{pid}] freq={e.frequency} added@{e.step_added} hit@{e.last_hit_step} "
                    f"broke={e.codes_broken} passed={e.times_passed} oracle={e.oracle_status}: "
                    f"assert {e.call} == {e.predicted}"
                )
    return 0


def run_export(args: argparse.Namespace) -> int:
    """Export every entry to JSONL (written atomically)."""
    path = resolve_db(args.target)
    with MistakeBook(path) as book:
        n = book.export_jsonl(args.output)
    print(f"{n} entries written to {args.output}")
    return 0
