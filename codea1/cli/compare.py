"""``codea1 compare RUN_DIR RUN_DIR ...``: the methods of training runs against each other at their
last evaluation point, paired over problems, on the training and the held-out problems separately
(:mod:`codea1.report.methods`; the math of ``codea1 eval compare``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from codea1.cli import CliError
from codea1.cli.options import check_resamples, check_seed

if TYPE_CHECKING:
    from codea1.report.methods import MethodComparison


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compare`` subcommand."""
    parser = subparsers.add_parser(
        "compare",
        help="compare the methods of training runs at their last evaluation point (paired over problems)",
        description="For each pair of methods among the runs (a method is train.method with its variant "
        "settings: reward.*, mistake_book.enabled, tester.view, tester.whitebox_share; runs of one method that "
        "differ in train.seed "
        "are its seeds, averaged per problem before pairing), the paired difference A - B at the last "
        "evaluation point every run has, with a 95 % bootstrap interval over problems and a two-sided "
        "sign-flip p, on the training problems (those in data.train) and the held-out ones separately: "
        "coder pass@1, tester validity, pass@k, mut@k and Mul. The runs must share their evaluation "
        "settings (eval.data, eval.seed, eval.n, ...).",
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="training run directory")
    parser.add_argument("--step", type=int, default=None, help="compare at this evaluation step instead")
    parser.add_argument(
        "--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000, at most 1000000)"
    )
    parser.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap and permutation seed (default 0)")
    parser.add_argument(
        "--output", type=Path, default=None, metavar="FILE.json", help="also write the table as JSON"
    )
    parser.add_argument(
        "--one-sided", action="store_true",
        help="also give the one-sided p of 'A is better' (column p_one_sided_a_better), for a direction named "
        "before looking; the default p is two-sided (p_two_sided)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``codea1 compare``."""
    from codea1.cli.outputs import check_distinct, check_output, write_output
    from codea1.report.methods import compare_methods, input_files
    from codea1.report.runs import ReportError

    check_resamples(args.resamples)
    check_seed(args.seed)
    if not (math.isfinite(args.confidence) and 0 < args.confidence < 1):
        raise CliError(f"--confidence must be in (0, 1), got {args.confidence:g}")
    if args.output is not None:
        check_output(str(args.output), "--output", parent_must_exist=False)
        for run_dir, path in input_files(args.run_dirs):  # each file the comparison reads
            check_distinct(args.output, "--output", {f"a file of RUN_DIR {run_dir}:": path})
    try:
        cmp = compare_methods(
            args.run_dirs,
            step=args.step,
            resamples=args.resamples,
            confidence=args.confidence,
            seed=args.seed,
        )
    except ReportError as e:
        raise CliError(str(e)) from None
    print(format_comparison(cmp, one_sided=args.one_sided))
    if args.output is not None:
        text = json.dumps(cmp.to_json(one_sided=args.one_sided), indent=2) + "\n"
        write_output(args.output, text, make_parents=True)
        print(f"wrote {args.output}", file=sys.stderr, flush=True)
    return 0


def format_comparison(cmp: MethodComparison, *, one_sided: bool = False) -> str:
    """The comparison as plain text: a header, one table per split, the notes. The p column is the
    two-sided sign-flip p (``p_two_sided``); ``one_sided`` adds the one-sided p of "A is better"."""
    s = cmp.settings
    lines = [
        f"codea1 compare: step {cmp.step}, eval.data={s['eval.data']} (eval.n={s['eval.n']}, "
        f"eval.tests={s['eval.tests']}, eval.seed={s['eval.seed']}), data.train={s['data.train']}",
        "methods:",
    ]
    for m in cmp.methods:
        seeds = ", ".join(str(x) for x in m.seeds)
        more = "; each problem's value averaged over the seeds before pairing" if len(m.runs) > 1 else ""
        runs = f"{len(m.runs)} run{'s' if len(m.runs) > 1 else ''}"
        lines.append(f"  {m.label}: {runs}, train.seed {seeds} ({', '.join(m.runs)}){more}")
    level = next((round(100 * r.delta.confidence) for r in cmp.results if r.delta), 95)
    for split in ("training", "held-out"):
        rows = [r for r in cmp.results if r.split == split]
        if not rows:
            continue
        also = ", one-sided p of A better" if one_sided else ""
        lines += ["", f"{split} problems ({cmp.problems[split]}): A - B in points, paired over problems, "
                  f"{level} % bootstrap interval, two-sided sign-flip p{also}"]  # fmt: skip
        p_columns = ["p_two_sided"] + (["p_one_sided_a_better"] if one_sided else [])
        table = [
            ["A vs B", "metric", "A", "B", "A-B", f"{level}% CI", *p_columns, "A>B", "A<B", "problems", ""]
        ]
        previous = ""
        for r in rows:
            pair = f"{r.a} vs {r.b}"
            shown = pair if pair != previous else ""
            previous = pair
            d = r.delta
            if d is None:
                table.append([shown, r.metric, *["-"] * (len(p_columns) + 7), f"({r.reason})"])
                continue
            table.append([
                shown, r.metric, f"{100 * d.after:.1f}", f"{100 * d.before:.1f}", f"{100 * d.delta:+.1f}",
                f"[{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}]", _p(d.p_two_sided),
                *([_p(d.p_one_sided)] if one_sided else []), str(d.improved), str(d.worsened), str(d.problems), "",
            ])  # fmt: skip
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)] + [0]
        for i, row in enumerate(table):
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
            if i == 0:
                lines.append("  ".join("-" * w for w in widths[:-1]))
    if cmp.notes:
        lines += ["", *(f"note: {n}" for n in cmp.notes)]
    return "\n".join(lines)


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"
