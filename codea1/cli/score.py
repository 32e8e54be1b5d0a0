"""``codea1 score``: rewards for raw model text, one JSON line in, one JSON line out.

Input line: ``{"id", "reference", "entry_point", "question", "codes": [text, ...],
"suites": [[text, ...] per code]}`` (optional ``"imports"``, and ``"golden_tests"``, the asserts the
mutation term's mutants are filtered on: ``--term mutation=W``). Output line: ``{"id",
"code_rewards", "suite_rewards", "breakdown"}``, plus ``"error"`` when the line could not be
scored. ``-`` means stdin / stdout. With ``--mistake-book DB`` the book's tests are replayed as
history and this run's failures are recorded as one new step (unless ``--no-update``).
"""

from __future__ import annotations

import argparse
import codecs
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from codea1.cli import CliError
from codea1.cli.interrupts import closed_whole
from codea1.cli.options import check_workers
from codea1.cli.outputs import OutputFile, check_distinct, check_input, check_output
from codea1.config import RewardConfig, SandboxConfig
from codea1.core.reward_terms import TESTER_TERMS, check_weights
from codea1.replay.mistake_book import BookFileError, BookWriteError, MistakeBook, StepReport
from codea1.scoring import ScoringItem, score_batch
from codea1.types import Problem

CHUNK = 256
"""Problems per sandbox call."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``score`` subcommand."""
    parser = subparsers.add_parser(
        "score",
        help="score code and test completions (raw model text) with the Code-A1 rewards",
        description="Parse, execute and reward code/test completions. Each input line holds one problem, "
        "its code completions and, per code, its test-suite completions.",
    )
    parser.add_argument(
        "--input", "-i", required=True, metavar="FILE.jsonl", help="input JSONL ('-' = stdin)"
    )
    parser.add_argument(
        "--output", "-o", required=True, metavar="FILE.jsonl", help="output JSONL ('-' = stdout)"
    )
    parser.add_argument(
        "--alpha", type=float, default=RewardConfig.alpha, metavar="A", help="validity weight α (default 0.5)"
    )
    parser.add_argument(
        "--normalize-by-suite",
        action="store_true",
        help="normalise Val/Adv by each suite's size instead of N = 8",
    )
    parser.add_argument(
        "--term",
        action="append",
        default=[],
        metavar="NAME=WEIGHT",
        help="add a reward term to R_T with this weight (repeatable; off by default): "
        + "; ".join(f"{t.name}: {t.summary}" for t in TESTER_TERMS),
    )
    parser.add_argument(
        "--mistake-book", type=Path, default=None, metavar="DB", help="replay and update this Mistake Book"
    )
    parser.add_argument(
        "--no-update", action="store_true", help="with --mistake-book: replay only, record nothing"
    )
    parser.add_argument(
        "--workers", type=int, default=0, metavar="N", help="sandbox workers (default: one per core)"
    )
    parser.set_defaults(func=run)


def parse_line(line: str) -> ScoringItem:
    """One input line as a :class:`ScoringItem`; ``ValueError`` with a reason when malformed.

    A line read from bytes that are not UTF-8 (decoded with ``surrogateescape``) is malformed too.
    """
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"not UTF-8 (at column {e.start + 1})") from None
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e.msg}") from None
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None
    if not isinstance(row, dict):
        raise ValueError("a line must be a JSON object")
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate (a \\udXXX escape), which is not text") from None
    for key in ("id", "reference", "entry_point"):
        if not isinstance(row.get(key), str) or not row[key]:
            raise ValueError(f"'{key}' must be a non-empty string")
    codes, suites = row.get("codes"), row.get("suites")
    if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
        raise ValueError("'codes' must be a list of strings")
    if not isinstance(suites, list) or not all(
        isinstance(s, list) and all(isinstance(t, str) for t in s) for s in suites
    ):
        raise ValueError("'suites' must be a list (one per code) of lists of strings")
    if len(suites) != len(codes):
        raise ValueError(f"{len(suites)} suite lists for {len(codes)} codes")
    golden = row.get("golden_tests", [])
    if not isinstance(golden, list) or not all(isinstance(t, str) for t in golden):
        raise ValueError("'golden_tests' must be a list of strings")
    problem = Problem(
        id=row["id"],
        question=str(row.get("question", "")),
        entry_point=row["entry_point"],
        reference=row["reference"],
        golden_tests=tuple(golden),
        imports=str(row.get("imports", "")),
    )
    return ScoringItem(problem, tuple(codes), tuple(tuple(s) for s in suites))


def _read(source: str) -> Iterator[str]:
    """Lines of ``source`` (``-`` = stdin); bytes that are not UTF-8 survive as surrogate escapes,
    so such a line costs only itself (:func:`parse_line` rejects it)."""
    if source == "-":
        raw = getattr(sys.stdin, "buffer", None)
        if raw is None:  # a text stream (stdin replaced in-process)
            yield from sys.stdin
        else:
            for n, line in enumerate(raw):
                yield (line.removeprefix(codecs.BOM_UTF8) if n == 0 else line).decode(
                    "utf-8", errors="surrogateescape"
                )
        return
    with open(source, encoding="utf-8-sig", errors="surrogateescape") as f:  # -sig: a leading BOM is dropped
        yield from f


def _line_id(line: str) -> Any:
    try:
        row = json.loads(line)
        pid = row.get("id") if isinstance(row, dict) else None
        json.dumps(pid, ensure_ascii=False).encode("utf-8")
        return pid
    except (ValueError, RecursionError):  # not JSON, or an id that is not text
        return None


def score_lines(
    lines: list[str],
    sandbox: Any,
    reward: RewardConfig,
    book: MistakeBook | None,
    numbers: Sequence[int] | None = None,
) -> tuple[list[dict], list]:
    """Output rows for ``lines`` (bad ones carry ``error``, naming the line's number in the input
    file: ``numbers``, by default 1, 2, ...) and the Mistake-Book updates."""
    rows: list[dict | None] = [None] * len(lines)
    items, where = [], []
    for i, line in enumerate(lines):
        try:
            items.append(parse_line(line))
            where.append(i)
        except ValueError as e:
            number = numbers[i] if numbers is not None else i + 1
            rows[i] = {"id": _line_id(line), "error": f"bad input line {number}: {e}"}
    history = book.retrieve_many(it.problem.id for it in items) if book is not None else None
    scores = score_batch(items, sandbox, reward=reward, history=history)
    for i, s in zip(where, scores, strict=True):
        rows[i] = s.to_dict()
    return [r for r in rows if r is not None], [s.mistakes for s in scores]


def _json_line(row: dict) -> str:
    """``row`` as one JSON line; ``\\u`` escapes only where a string is not valid text."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(row, ensure_ascii=True)
    return text + "\n"


def write_and_record(
    target: str, rows: list[dict], book: MistakeBook | None, updates: list
) -> StepReport | None:
    """Write the output and record the book's step (``book`` None: none), both or neither.

    The output is written whole into its unnamed file first (a full disk fails here, before the
    book), then the step is committed (a lock or a full disk fails here: the output is dropped),
    then the output gets its name. Standard output is written only after the step is committed.
    """
    text = "".join(_json_line(r) for r in rows)
    report = None
    with OutputFile(target) as out:
        to_stdout = out.stream is sys.stdout
        if not to_stdout:
            out.stream.write(text)
            out.stream.flush()
        if book is not None:
            try:
                report = book.apply_step((book.last_step or 0) + 1, updates)
            except BookWriteError as e:
                raise CliError(f"--mistake-book {e}; nothing was written") from None
        if to_stdout:
            out.stream.write(text)
        out.commit()
    return report


def open_book(path: Path, no_update: bool) -> MistakeBook:
    """The ``--mistake-book``: read-only with ``--no-update``, else for writing (a missing path becomes
    a new book, in a directory that must exist); a file that is not a Mistake Book, or a book that
    cannot be written now (locked by another process, a read-only file system), is a
    :class:`CliError`, and the file stays untouched."""
    if not no_update:
        check_output(str(path), "--mistake-book")
    try:
        return MistakeBook(path, read_only=no_update)
    except BookFileError as e:
        raise CliError(f"--mistake-book: {e}") from None
    except BookWriteError as e:
        raise CliError(f"--mistake-book {e}") from None


def _term_weights(specs: Sequence[str]) -> dict[str, float]:
    """``--term NAME=WEIGHT`` values as ``reward:`` fields (:data:`TESTER_TERMS` names them), or a
    :class:`CliError` naming the bad one."""
    weights: dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            if not sep:
                raise ValueError("expected NAME=WEIGHT")
            weights[name.strip()] = float(value)
            check_weights({name.strip(): float(value)})
        except ValueError as e:
            raise CliError(f"--term {spec}: {e}") from None
    by_name = {t.name: t.weight for t in TESTER_TERMS}
    return {by_name[name]: w for name, w in weights.items() if by_name[name]}


def run(args: argparse.Namespace) -> int:
    """Score every line, write the output, then record the Mistake-Book step.

    Options and paths are checked before anything is opened or started.
    """
    from codea1.sandbox.local import Sandbox, SandboxUnavailable  # starts worker processes: import on use

    if not 0.0 <= args.alpha <= 1.0:
        raise CliError(f"--alpha must be in [0, 1], got {args.alpha}")
    weights = _term_weights(args.term)
    check_workers(args.workers)
    if args.no_update and args.mistake_book is None:
        raise CliError("--no-update needs --mistake-book")
    check_input(args.input)
    check_output(args.output)
    check_distinct(args.output, "--output", {"--input": args.input, "--mistake-book": args.mistake_book})
    check_distinct(args.mistake_book, "--mistake-book", {"--input": args.input})
    if args.mistake_book is not None and args.mistake_book.is_dir():
        raise CliError(f"--mistake-book {args.mistake_book}: is a directory, not a database file")
    reward = RewardConfig(alpha=args.alpha, normalize_by_suite=args.normalize_by_suite, **weights)
    book = open_book(args.mistake_book, args.no_update) if args.mistake_book is not None else None
    try:
        numbered = [(n, line) for n, line in enumerate(_read(args.input), 1) if line.strip()]
    except BaseException:
        if book is not None:
            book.close()
        raise
    out: list[dict] = []
    updates = []
    try:
        try:
            sandbox = Sandbox(SandboxConfig(workers=args.workers))
        except SandboxUnavailable as e:
            raise CliError(str(e)) from None
        with closed_whole(sandbox):
            for start in range(0, len(numbered), CHUNK):
                chunk = numbered[start : start + CHUNK]
                rows, ups = score_lines([t for _, t in chunk], sandbox, reward, book, [n for n, _ in chunk])
                out.extend(rows)
                updates.extend(ups)
        n_err = sum("error" in r for r in out)
        nothing = bool(out) and n_err == len(out)
        recording = book is not None and not args.no_update and not nothing
        report = write_and_record(args.output, out, book if recording else None, updates)
        if report is not None:
            print(f"mistake book step {report.step}: +{report.added} new, {report.removed} removed",
                  file=sys.stderr)  # fmt: skip
    finally:
        if book is not None:
            book.close()
    if nothing:
        where = "the output" if args.output == "-" else args.output
        unrecorded = "; no Mistake Book step recorded" if book is not None and not args.no_update else ""
        print(f"codea1 score: every one of the {len(out)} line(s) is an error row (the reason is in its "
              f"'error' field in {where}): nothing scored{unrecorded}", file=sys.stderr)  # fmt: skip
        return 1
    errors = f", {n_err} line(s) with errors (their rows hold the reason in 'error')" if n_err else ""
    print(f"scored {len(out) - n_err} of {len(out)} line(s){errors}", file=sys.stderr)
    return 0
