"""``codea1 mistakes inspect|export``: look inside a run's Mistake Book, or dump it to JSONL.

Both open the book read-only: a file that is not a Mistake Book (empty, JSONL, another program's
SQLite database, a corrupt one) is a one-line error and stays byte-identical.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from codea1.cli import CliError
from codea1.cli.outputs import OutputFile, check_distinct, check_output
from codea1.replay.mistake_book import DEFAULT_FILENAME, BookFileError, MistakeBook


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
    export.add_argument(
        "--output", "-o", type=Path, required=True, metavar="FILE.jsonl", help="output file ('-' = stdout)"
    )
    export.set_defaults(func=run_export)


def resolve_db(target: Path) -> Path:
    """The database file named by a run directory or a path; an error if it does not exist."""
    path = target / DEFAULT_FILENAME if target.is_dir() else target
    if not path.exists():
        raise CliError(f"no Mistake Book at {path}")
    return path


def open_read_only(path: Path) -> MistakeBook:
    """The book at ``path`` opened read-only; a file that is not a book is a :class:`CliError`."""
    try:
        return MistakeBook(path, read_only=True)
    except BookFileError as e:
        raise CliError(str(e)) from None


def _reading(path: Path, body: Callable[[MistakeBook], int]) -> int:
    """Run ``body`` on the book opened read-only; SQLite errors while reading become one line."""
    try:
        with open_read_only(path) as book:
            return body(book)
    except sqlite3.Error as e:
        raise CliError(f"{path}: cannot read the Mistake Book ({e})") from None


def _stdout_closed() -> int:
    """The reader of stdout went away (``| head``): stop quietly, as a pipe filter does."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush has nowhere to fail
    os.close(devnull)
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    """Print the book's size, last step, the problems with the most weight, and sample entries."""
    if args.top < 0 or args.samples < 0:
        raise CliError(f"--top and --samples must be >= 0, got {args.top} and {args.samples}")
    path = resolve_db(args.target)
    try:
        code = _reading(path, lambda book: _print_inspection(book, path, args.top, args.samples))
        sys.stdout.flush()
    except BrokenPipeError:
        return _stdout_closed()
    return code


def _print_inspection(book: MistakeBook, path: Path, top: int, samples: int) -> int:
    """The inspection report on stdout."""
    problems = book.problem_sizes()
    print(f"mistake book: {path}")
    print(f"last step: {book.last_step if book.last_step is not None else 'none'}")
    print(f"entries: {book.size()} across {len(problems)} problem(s)")
    if not problems:
        return 0
    print(f"\n{'problem':<40} {'entries':>8} {'total freq':>10}")
    for pid, n, total in problems[:top]:
        print(f"{pid:<40} {n:>8} {total:>10}")
    print("\nsample entries (highest frequency first):")
    for pid, _, _ in problems[:top]:
        for e in book.entries(pid)[:samples]:
            print(
                f"  [{pid}] freq={e.frequency} added@{e.step_added} hit@{e.last_hit_step} "
                f"broke={e.codes_broken} passed={e.times_passed} oracle={e.oracle_status}: "
                f"assert {e.call} == {e.predicted}"
            )
    return 0


def run_export(args: argparse.Namespace) -> int:
    """Export every entry to JSONL through the output helper (:class:`OutputFile`: a file written
    whole or not at all, a symlink written through, a device or FIFO written in place)."""
    path = resolve_db(args.target)
    out = str(args.output)
    check_output(out)
    check_distinct(out, "--output", {"the Mistake Book": path})

    def export(book: MistakeBook) -> int:
        with OutputFile(out) as f:
            n = book.write_jsonl(f.stream)
            f.commit()
        return n

    try:
        n = _reading(path, export)
    except OSError as e:
        raise CliError(f"cannot write {out}: {e.strerror or e}") from None
    print(f"{n} entries written to {out}", file=sys.stderr if out == "-" else sys.stdout)
    return 0
