"""``codea1 sandbox run | selftest | doctor``: batch execution, the exploit suite, isolation report.

``run`` reads JSONL lines ``{"id", "reference", "entry_point", "codes": [...], "tests": [{"call",
"predicted"}...]}`` (optionally ``"question_names": [...]`` and ``"question_helpers"``, the question's
names and helper source of ``GridJob``) and writes one line per input ``{"id", "oracle", "code_status", "grid"}``; a bad
line (not UTF-8, not JSON, a missing or mistyped field) yields ``{"id", "error"}`` instead. ``-``
means stdin / stdout. Options and paths are checked before anything starts, and the output file
appears only once every line is answered (see ``codea1.cli.outputs``). The last line on stderr
counts the lines run and the error rows; when every line is an error row the exit code is 1.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from codea1.cli import CliError
from codea1.cli.interrupts import closed_whole
from codea1.cli.options import check_at_least, check_at_most, check_seconds, check_workers
from codea1.cli.outputs import OutputFile, check_distinct, check_input, check_output
from codea1.config import SandboxConfig
from codea1.limits import MAX_JOBS_PER_CALL
from codea1.sandbox.attacks import run_suite
from codea1.sandbox.channels import channel_status
from codea1.sandbox.local import Sandbox, SandboxUnavailable
from codea1.sandbox.tasks import MAX_CPU_S, check_config
from codea1.types import GridJob, TestCase


def register(subparsers: Any) -> None:
    """Add the ``sandbox`` verb and its three actions."""
    p = subparsers.add_parser("sandbox", help="run code against tests in the sandbox; selftest; doctor")
    sub = p.add_subparsers(dest="sandbox_command", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="execute JSONL grid jobs")
    run.add_argument("--input", required=True, help="JSONL file of jobs, or - for stdin")
    run.add_argument("--output", required=True, help="JSONL file of results, or - for stdout")
    run.add_argument("--batch", type=int, default=256, help="jobs per sandbox call")
    run.add_argument("--rel-tol", type=float, default=1e-6)
    run.add_argument("--abs-tol", type=float, default=1e-6)
    run.set_defaults(func=cmd_run)
    st = sub.add_parser("selftest", help="run the exploit suite; exit 1 on any escape")
    st.set_defaults(func=cmd_selftest)
    doc = sub.add_parser("doctor", help="list the isolation layers active on this machine")
    doc.set_defaults(func=cmd_doctor)
    for q in (run, st, doc):
        q.add_argument("--workers", type=int, default=0, help="worker processes (0 = one per core)")
        q.add_argument("--test-cpu-s", type=float, default=None, help="CPU budget per test call")
        q.add_argument(
            "--load-cpu-s", type=float, default=None, help="CPU budget for a program's definitions"
        )
        q.add_argument("--isolation", choices=("auto", "strict", "none"), default="auto")


def check_sandbox_options(args: argparse.Namespace) -> None:
    """Raise :class:`CliError` (one line) for ``--workers`` / ``--test-cpu-s`` / ``--load-cpu-s`` values
    the sandbox cannot honour, before anything is started or created."""
    check_workers(args.workers)
    check_seconds(args.test_cpu_s, "--test-cpu-s", MAX_CPU_S)
    check_seconds(args.load_cpu_s, "--load-cpu-s", MAX_CPU_S)


def _config(args: argparse.Namespace, **defaults: Any) -> SandboxConfig:
    check_sandbox_options(args)
    budgets = {"test_cpu_s": args.test_cpu_s, "load_cpu_s": args.load_cpu_s}
    defaults |= {k: v for k, v in budgets.items() if v is not None}
    cfg = SandboxConfig(workers=args.workers, isolation=args.isolation, **defaults)
    try:
        check_config(cfg)
    except ValueError as e:
        raise CliError(str(e)) from None
    return cfg


def _start(cfg: SandboxConfig) -> Sandbox:
    try:
        return Sandbox(cfg)
    except SandboxUnavailable as e:
        raise CliError(str(e)) from e


def parse_job(line: str, lineno: int) -> GridJob:
    """One input line → :class:`GridJob`; raises ValueError with a message on malformed input."""
    try:
        obj = json.loads(line)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise ValueError("line is not a JSON object")
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate (a \\udXXX escape), which is not text") from None
    job_id = obj.get("id", f"line-{lineno}")
    for key, kind in (("reference", str), ("entry_point", str), ("codes", list), ("tests", list)):
        if not isinstance(obj.get(key), kind):
            raise ValueError(f"field {key!r} missing or not a {kind.__name__}")
    if not all(isinstance(c, str) for c in obj["codes"]):
        raise ValueError("every code must be a string")
    tests = []
    for t in obj["tests"]:
        if not (
            isinstance(t, dict) and isinstance(t.get("call"), str) and isinstance(t.get("predicted"), str)
        ):
            raise ValueError("every test must be {'call': str, 'predicted': str}")
        tests.append(TestCase(t["call"], t["predicted"]))
    names = obj.get("question_names")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise ValueError("field 'question_names' must be a list of strings")
    helpers = obj.get("question_helpers", "")
    if not isinstance(helpers, str):
        raise ValueError("field 'question_helpers' must be a string")
    return GridJob(
        str(job_id),
        obj["reference"],
        obj["entry_point"],
        tuple(obj["codes"]),
        tuple(tests),
        None if names is None else frozenset(names),
        helpers,
    )


MAX_LINE_BYTES = 64 << 20
"""Longest input line read (a job holds its codes and tests; the 10 MB source attack fits)."""


def bounded(stream: Iterable[bytes | str], limit: int = MAX_LINE_BYTES) -> Iterator[bytes | str]:
    """The lines of ``stream``, each read with at most ``limit`` + 1 bytes in memory; a longer line
    (``--input /dev/zero``, a binary file) is a :class:`CliError` instead of an endless read."""
    readline = getattr(stream, "readline", None)
    if readline is None or isinstance(stream, io.TextIOBase):
        yield from stream
        return
    lineno = 0
    while True:
        raw = readline(limit + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            raise CliError(
                f"--input line {lineno} is longer than {limit >> 20} MiB: not a JSONL file of jobs?"
            )
        yield raw


def read_lines(stream: Iterable[bytes | str]) -> Iterator[tuple[int, str | None, str]]:
    """``(line number, text, "")`` per non-blank line, or ``(n, None, reason)`` when it is not UTF-8."""
    for lineno, raw in enumerate(bounded(stream), 1):
        if not raw.strip():
            continue
        if isinstance(raw, str):  # a text stream (stdin replaced in-process)
            yield lineno, raw, ""
            continue
        try:
            yield lineno, raw.decode("utf-8"), ""
        except UnicodeDecodeError as e:
            yield lineno, None, f"not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"


def cmd_run(args: argparse.Namespace) -> int:
    """Execute every job of the input file; results in input order.

    Options and paths are checked before anything starts; the output appears only when every line
    is done (Ctrl-C or a crash leaves no partial file).
    """
    cfg = _config(args)
    check_at_least(args.batch, "--batch", 1)
    check_at_most(args.batch, "--batch", MAX_JOBS_PER_CALL)
    check_at_least(args.rel_tol, "--rel-tol", 0)
    check_at_least(args.abs_tol, "--abs-tol", 0)
    check_input(args.input)
    check_output(args.output)
    check_distinct(args.output, "--output", {"--input": args.input})
    with contextlib.ExitStack() as stack:
        if args.input == "-":
            src: Iterable[bytes | str] = getattr(sys.stdin, "buffer", sys.stdin)
        else:
            src = stack.enter_context(open(args.input, "rb"))
        out = stack.enter_context(OutputFile(args.output))
        counts = {"lines": 0, "errors": 0}
        with closed_whole(_start(cfg)) as sandbox:
            pending: list[GridJob | dict[str, str]] = []

            def flush() -> None:
                jobs = [j for j in pending if isinstance(j, GridJob)]
                grids = iter(sandbox.run_grids(jobs, rel_tol=args.rel_tol, abs_tol=args.abs_tol))
                for item in pending:
                    row = next(grids).to_dict() if isinstance(item, GridJob) else item
                    out.stream.write(json.dumps(row, ensure_ascii=True) + "\n")
                counts["lines"] += len(pending)
                counts["errors"] += len(pending) - len(jobs)
                pending.clear()

            for lineno, line, bad in read_lines(src):
                if line is None:
                    pending.append({"id": f"line-{lineno}", "error": f"line {lineno}: {bad}"})
                else:
                    try:
                        pending.append(parse_job(line, lineno))
                    except (ValueError, TypeError) as e:
                        pending.append({"id": _guess_id(line, lineno), "error": f"line {lineno}: {e}"})
                if len(pending) >= args.batch:
                    flush()
            flush()
        out.commit()
    return report(counts["lines"], counts["errors"], args.output)


def report(lines: int, errors: int, output: str) -> int:
    """Say on stderr how many lines ran and how many are error rows; the exit code: 1 when every
    line is an error row (nothing ran), else 0."""
    where = "the output" if output == "-" else output
    if lines and errors == lines:
        print(f"codea1 sandbox run: every one of the {lines} line(s) is an error row (the reason is in "
              f"its 'error' field in {where}): nothing ran", file=sys.stderr)  # fmt: skip
        return 1
    bad = f", {errors} line(s) with errors (the reason is in their 'error' field)" if errors else ""
    print(f"codea1 sandbox run: ran {lines - errors} of {lines} line(s){bad}", file=sys.stderr)
    return 0


def _guess_id(line: str, lineno: int) -> str:
    try:
        obj = json.loads(line)
        if isinstance(obj, dict) and "id" in obj:
            return str(obj["id"])
    except (ValueError, RecursionError):
        pass
    return f"line-{lineno}"


def cmd_selftest(args: argparse.Namespace) -> int:
    """Run the exploit suite, one row per attack; exit 1 on any escape."""
    cfg = _config(args, test_cpu_s=0.5, load_cpu_s=2.0)
    escapes = 0
    with _start(cfg) as sandbox:
        print(f"{'attack':32} {'result':9} verdicts")

        def show(r: Any) -> None:
            nonlocal escapes
            escapes += not r.contained
            status = "contained" if r.contained else "ESCAPED"
            print(
                f"{r.name:32} {status:9} {r.verdicts[:90]}" + (f"  <- {r.detail}" if r.detail else ""),
                flush=True,
            )

        results = run_suite(sandbox, on_result=show)
    print(f"{len(results) - escapes}/{len(results)} contained")
    return 1 if escapes else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Start one worker and print which isolation layers it runs with."""
    args.workers = 1
    with _start(_config(args)) as sandbox:
        layers = sandbox.layers()
    for name, status in layers.items():
        print(f"{name:16} {status}")
    if os.geteuid() == 0:
        print(f"{'user_ns':16} not needed (running as root)")
    missing = [k for k, v in layers.items() if v != "active"]
    print(
        "all layers active" if not missing else f"{len(missing)} layer(s) unavailable: {', '.join(missing)}"
    )
    print("\nhost channels:")
    statuses = channel_status(layers)
    for channel, status in statuses:
        print(f"  {channel:70} {status}")
    still_open = [c for c, s in statuses if s.startswith("OPEN")]
    print("every host channel closed" if not still_open else f"{len(still_open)} host channel(s) OPEN")
    return 0
