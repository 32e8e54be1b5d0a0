"""``codea1 report RUN_DIR [RUN_DIR ...]``: plots and an HTML page for one or more training runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codea1.cli import CliError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="plot training runs (several are overlaid) into PNGs and one HTML page",
        description="Plot the metrics of one or more training runs (overlaid for comparison) and write "
        "an HTML page with the plots, each run's resolved config and its latest evaluation table.",
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="training run directory")
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        default=None,
        metavar="DIR",
        help="where to write index.html and the PNGs (default: RUN_DIR/report for one run, ./report for several)",
    )
    parser.add_argument(
        "--smooth",
        type=int,
        default=1,
        metavar="N",
        help="draw moving averages over N steps, raw values faint (default 1: raw values only)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the report; report errors become :class:`CliError`, warnings go to stderr."""
    from codea1.report import ReportError, build_report  # matplotlib loads only when reporting

    try:
        result = build_report(list(args.run_dirs), args.output, smooth=args.smooth)
    except ReportError as e:
        raise CliError(str(e)) from None
    for warning in result.warnings:
        print(f"codea1: warning: {warning}", file=sys.stderr)
    print(f"{len(result.figures)} figure(s) written; no data for: {', '.join(result.missing) or 'none'}")
    print(result.page)
    return 0
