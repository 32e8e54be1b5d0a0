"""``codea1 eval compare``: before vs after, a paired bootstrap of two ``eval code`` (or two
``eval tests``) runs, with a sign-flip permutation p-value; ``--problems`` keeps one subset. It
loads no model and evaluates nothing: it reads two evaluations already written (its parser is in
``cli.eval_args`` with the other verbs').

Each side is a results JSONL of ``eval code`` or the metrics JSON that names one (its ``results``
field); the records are read with ``codea1.results_file.read_records``, as the report reads them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from codea1.cli import CliError
from codea1.cli.options import check_at_least
from codea1.cli.outputs import check_distinct, check_input, check_output, write_output
from codea1.eval.tables import format_table
from codea1.results_file import read_json, read_records


def run_compare(args: argparse.Namespace) -> int:
    """``codea1 eval compare``."""
    from codea1.core.comparison import compare_records, delta_table, restrict

    check_at_least(args.resamples, "--resamples", 1)
    if not (math.isfinite(args.confidence) and 0 < args.confidence < 1):
        raise CliError(f"--confidence must be in (0, 1), got {args.confidence:g}")
    if args.output is not None:
        check_output(str(args.output), "--output", parent_must_exist=False)
        check_distinct(args.output, "--output", {"before": args.before, "after": args.after})
    before, after = _code_records(args.before), _code_records(args.after)
    for path, records in ((args.before, before), (args.after, after)):
        if not records:
            raise CliError(f"{path}: no per-problem records to compare (an empty results file?)")
    if args.problems:
        ids = _problem_ids(args.problems)
        before, after = restrict(before, ids), restrict(after, ids)
        if not before or not after:
            raise CliError(f"--problems {args.problems}: none of its {len(ids)} problems is in both results")
    try:
        deltas = compare_records(
            before, after, resamples=args.resamples, confidence=args.confidence, seed=args.seed,
            metric=args.metric,
        )  # fmt: skip
    except ValueError as e:
        raise CliError(str(e)) from None
    subset = f", problems of {args.problems}" if args.problems else ""
    title = (
        f"{args.after} vs {args.before} ({args.metric}{subset}; paired bootstrap, {args.resamples} resamples)"
    )
    meta = {
        "before": str(args.before), "after": str(args.after), "resamples": args.resamples,
        "metric": args.metric, "problems": args.problems or "",
    }  # fmt: skip
    table = delta_table(deltas)
    print(format_table(table, title))
    if args.output is not None:
        write_output(
            args.output, json.dumps({**table, "comparison": meta}, indent=2) + "\n", make_parents=True
        )
        print(f"wrote {args.output}", file=sys.stderr, flush=True)
    return 0


def _problem_ids(spec: str) -> set[str]:
    """The problem ids of a data spec (``--problems``), or a one-line error."""
    from codea1.data.problems import load_problems
    from codea1.data.rows import DataError

    try:
        return {p.id for p in load_problems(spec)}
    except (DataError, OSError, ValueError) as e:
        raise CliError(f"--problems {spec}: {e}") from None


def _code_records(path: Path, named_by: Path | None = None) -> list[dict[str, Any]]:
    """Per-problem records from a results JSONL, or from the file a metrics JSON names."""
    check_input(str(path), "eval compare:" if named_by is None else f"eval compare: {named_by} names")
    try:
        if path.suffix != ".json":
            return read_records(path)
        data = read_json(path)
    except ValueError as e:
        raise CliError(str(e)) from None
    named = data.get("results") if isinstance(data, dict) else None
    if not isinstance(named, str):
        raise CliError(f"{path}: a metrics JSON without a 'results' file (re-run `eval code --output`)")
    if named_by is not None:
        raise CliError(f"{named_by}: names {path}, which is not a results JSONL")
    return _code_records(Path(named), named_by=path)
