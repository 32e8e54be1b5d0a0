"""The ``codea1`` command: one subcommand module per verb, each exposing ``register(subparsers)``.

Subcommand modules set ``func`` on their parser; ``main`` dispatches to it and turns expected
errors (bad config, bad data, missing files) into a one-line message and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from codea1 import __version__
from codea1.config import ConfigError
from codea1.data.problems import DataError

SUBCOMMANDS = ("data", "sandbox", "score", "mistakes", "train", "eval", "report", "doctor")
"""Verbs, in the order ``--help`` lists them; each is the module ``codea1.cli.<verb>``."""


class CliError(Exception):
    """An expected failure with a message for the user (no stack trace)."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="codea1", description="Adversarial co-evolution of a Code LLM and a Test LLM (Code-A1)."
    )
    parser.add_argument("--version", action="version", version=f"codea1 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"codea1.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"codea1.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``codea1`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ConfigError, DataError, CliError, FileNotFoundError) as e:
        print(f"codea1: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("codea1: interrupted", file=sys.stderr)
        return 130
