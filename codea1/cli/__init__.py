"""The ``codea1`` command: one subcommand module per verb, each exposing ``register(subparsers)``.

Subcommand modules set ``func`` on their parser; ``main`` dispatches to it and turns expected
errors (bad config, bad data, missing or unreadable files) into a one-line message and exit code 2,
and data warnings into one ``codea1: warning:`` line each.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from codea1 import __version__
from codea1.cli.compile_cache import no_empty_compile_cache
from codea1.cli.interrupts import ignore_interrupts
from codea1.cli.malloc_relaunch import Relaunch
from codea1.config import ConfigError
from codea1.data.problems import DataError, DataWarning
from codea1.sandbox.executor import SandboxUnavailable

SUBCOMMANDS = (
    "data", "sandbox", "score", "mistakes", "train", "eval", "compare", "export", "report", "doctor",
)  # fmt: skip
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


def os_error_line(e: OSError) -> str:
    """``PATH: reason`` for an ``OSError`` (``[Errno 2] No such file ...: 'x'`` reads worse)."""
    if e.strerror and e.filename is not None:
        return f"{e.filename}: {e.strerror}"
    return str(e) or type(e).__name__


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``codea1`` console script; returns the exit code.

    Run as the program (``argv`` None), the command's end is also the end of interrupts: from the
    moment it has returned or printed its one line, Ctrl-C and SIGTERM are ignored, so the exit
    callbacks run to the end (torch's finalizers once printed a ``KeyboardInterrupt`` traceback).
    An empty compile cache that torch made meanwhile is removed at the end (:mod:`codea1.cli.compile_cache`).
    A command that asks for another allocator ends here and starts again on it
    (:mod:`codea1.cli.malloc_relaunch`).
    """
    try:
        with no_empty_compile_cache():
            return _main(argv)
    except Relaunch as again:  # the command asked for another allocator: same command, new process
        try:
            again.exec()
        except OSError as e:
            print(f"codea1: error: cannot restart on {again.library}: {os_error_line(e)}", file=sys.stderr)
            return 2


def _main(argv: list[str] | None) -> int:
    program = argv is None
    try:
        parser = build_parser()  # imports every verb (torch among them): seconds a Ctrl-C may land in
    except KeyboardInterrupt:
        _finished(program)
        print("codea1: interrupted", file=sys.stderr)
        return 130
    args = parser.parse_args(argv)
    args.program = program  # whether the command may restart itself (codea1.cli.malloc_relaunch)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    with warnings.catch_warnings(), _sigterm_as_interrupt():
        warnings.simplefilter("always", DataWarning)
        warnings.showwarning = _show_warning(warnings.showwarning)
        try:
            code = int(args.func(args) or 0)
        except (ConfigError, DataError, CliError) as e:
            _finished(program)
            print(f"codea1: error: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            _finished(program)
            print(f"codea1: error: {os_error_line(e)}", file=sys.stderr)
            return 2
        except SandboxUnavailable as e:  # a host fault (e.g. a memory limit it cannot set), never results
            _finished(program)
            print(f"codea1: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            _finished(program)
            print("codea1: interrupted", file=sys.stderr)
            return 130
        _finished(program)
        return code


def _finished(program: bool) -> None:
    """The command is over: run as the program, ignore interrupts from now on (see :func:`main`)."""
    if program:
        ignore_interrupts()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (what ``timeout``, Slurm and Kubernetes send) is handled like Ctrl-C: every verb's
    interrupt path runs (outputs left finished or absent, sandbox scratch and cgroups removed; a
    training run checkpoints, see ``Trainer``) and the command ends in one line."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is interrupt:  # not when the command ended ignoring it
            signal.signal(signal.SIGTERM, previous)


def _show_warning(fallback: Any) -> Any:
    """A ``warnings.showwarning`` printing a :class:`DataWarning` as one line, others as before."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, DataWarning):
            print(f"codea1: warning: {message}", file=sys.stderr)
        else:
            fallback(message, category, filename, lineno, file, line)

    return show
