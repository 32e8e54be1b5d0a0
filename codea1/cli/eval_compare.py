"""``codea1 eval compare``: before vs after, a paired bootstrap of two ``eval code`` (or two
``eval tests``) runs, with a two-sided sign-flip permutation p-value (the one-sided one only with
``--one-sided``, labelled); ``--before``/``--after`` take several files per side (training seeds),
each problem averaged over its side's files before pairing; ``--problems`` keeps one subset. It
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
from codea1.cli.options import check_resamples, check_seed
from codea1.cli.outputs import check_distinct, check_input, check_output, same_file, write_output
from codea1.data.sources import spec_file
from codea1.eval.tables import format_table
from codea1.results_file import read_json, read_records


def run_compare(args: argparse.Namespace) -> int:
    """``codea1 eval compare``."""
    from codea1.core.comparison import compare_sides, delta_table, restrict

    check_resamples(args.resamples)
    check_seed(args.seed)
    if not (math.isfinite(args.confidence) and 0 < args.confidence < 1):
        raise CliError(f"--confidence must be in (0, 1), got {args.confidence:g}")
    before_paths, after_paths = _sides(args)
    if args.output is not None:
        check_output(str(args.output), "--output", parent_must_exist=False)
        inputs = {f"before {p}": p for p in before_paths} | {f"after {p}": p for p in after_paths}
        inputs["--problems"] = spec_file(args.problems) if args.problems else None
        check_distinct(args.output, "--output", inputs)
    before = [_code_records(p) for p in before_paths]
    after = [_code_records(p) for p in after_paths]
    for path, records in zip([*before_paths, *after_paths], [*before, *after], strict=True):
        if not records:
            raise CliError(f"{path}: no per-problem records to compare (an empty results file?)")
    if args.problems:
        ids = _problem_ids(args.problems)
        before, after = [restrict(r, ids) for r in before], [restrict(r, ids) for r in after]
        if not all(before) or not all(after):
            raise CliError(
                f"--problems {args.problems}: none of its {len(ids)} problems is in every results file"
            )
    try:
        deltas = compare_sides(
            before, after, resamples=args.resamples, confidence=args.confidence, seed=args.seed,
            metric=args.metric,
        )  # fmt: skip
    except ValueError as e:
        raise CliError(str(e)) from None
    subset = f", problems of {args.problems}" if args.problems else ""
    seeds = ", each problem averaged over a side's files" if len(before) > 1 or len(after) > 1 else ""
    sided = "two-sided p" + (", and the one-sided p of 'after is better'" if args.one_sided else "")
    title = (
        f"{_names(after_paths)} vs {_names(before_paths)} ({args.metric}{subset}{seeds}; paired bootstrap, "
        f"{args.resamples} resamples; sign-flip {sided})"
    )
    meta = {
        "before": [str(p) for p in before_paths], "after": [str(p) for p in after_paths],
        "resamples": args.resamples, "metric": args.metric, "problems": args.problems or "",
        "p": "two-sided sign-flip (p_two_sided)"
        + ("; one-sided, after better (p_one_sided_after_better)" if args.one_sided else ""),
    }  # fmt: skip
    table = delta_table(deltas, one_sided=args.one_sided)
    print(format_table(table, title))
    if args.output is not None:
        write_output(
            args.output, json.dumps({**table, "comparison": meta}, indent=2) + "\n", make_parents=True
        )
        print(f"wrote {args.output}", file=sys.stderr, flush=True)
    return 0


def _sides(args: argparse.Namespace) -> tuple[list[Path], list[Path]]:
    """The results files of each side: ``BEFORE AFTER``, or ``--before FILE... --after FILE...``;
    a one-line error for any other shape, or for a file given twice (it would be paired with itself
    or counted twice in a side's average)."""
    if args.files and (args.before_files or args.after_files):
        raise CliError("give either BEFORE AFTER or --before FILE... --after FILE..., not both")
    if args.files:
        if len(args.files) != 2:
            raise CliError(
                f"give two results files, BEFORE AFTER (got {len(args.files)}), or --before/--after"
            )
        before, after = [args.files[0]], [args.files[1]]
    elif args.before_files and args.after_files:
        before, after = list(args.before_files), list(args.after_files)
    else:
        raise CliError("give BEFORE AFTER, or both --before FILE... and --after FILE...")
    paths = [*before, *after]
    for i, p in enumerate(paths):
        for q in paths[:i]:
            if same_file(p, q):
                raise CliError(f"{p} is given twice (as {q}): each results file may appear once")
    return before, after


def _names(paths: list[Path]) -> str:
    return str(paths[0]) if len(paths) == 1 else "(" + " + ".join(str(p) for p in paths) + ")"


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
