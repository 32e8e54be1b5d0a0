"""Every verb that writes an output file writes it through one helper, ``cli.outputs.OutputFile``
(issue 26, part 5): a regular file appears whole (temp + rename in its directory), a symlink is
written through (the link stays, its target gets the output), a character device or a FIFO is
written in place and never replaced by a regular file (``/dev/full`` is one line, exit 2). No
stray temporary file is left anywhere.

The devices are private nodes made with ``mknod`` (a ``/dev/full`` and a ``/dev/null`` in the test's
directory), so that a regression replaces those, never the host's.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from codea1.replay.mistake_book import MistakeBook, MistakeHit, MistakeUpdate
from codea1.types import TestCase

from .reliability_cli import (
    FIXTURES,
    Place,
    assert_one_line_error,
    place_fixture,  # noqa: F401 - the `place` fixture
    run_cli,
    tree,
)

RECORDS = '{"run_key": {"model": "m"}}\n{"id": "p", "source": "s", "n": 1, "correct": [true]}\n'
JOB = {"id": "neg", "reference": "def f(x):\n    return -x\n", "entry_point": "f",
       "codes": ["def f(x):\n    return -x\n"], "tests": [{"call": "f(2)", "predicted": "-2"}]}  # fmt: skip
CLAMP = "```python\ndef clamp(x, lo, hi):\n    return min(max(x, lo), hi)\n```"


def _mistakes(place: Place, out: Path) -> list[object]:
    book = place.data / "book.sqlite"
    if not book.exists():
        with MistakeBook(book, capacity=100) as b:
            b.apply_step(1, [MistakeUpdate("P/1", failed=(MistakeHit(TestCase("f(1)", "0"), 1),))])
    return ["mistakes", "export", book, "-o", out]


def _compare(place: Place, out: Path) -> list[object]:
    for name in ("a.jsonl", "b.jsonl"):
        (place.data / name).write_text(RECORDS)
    return ["eval", "compare", place.data / "a.jsonl", place.data / "b.jsonl", "--resamples", "10",
            "--output", out]  # fmt: skip


def _eval_code(place: Place, out: Path) -> list[object]:
    samples = place.data / "samples.jsonl"
    samples.write_text(json.dumps({"id": "fx/clamp", "completion": CLAMP}) + "\n")
    return ["eval", "code", "--data", FIXTURES / "eval" / "problems.jsonl", "--limit", "1", "--samples",
            samples, "--results-dir", place.tmp / "res", "--cache-dir", place.tmp / "cache", "--workers",
            "1", "--output", out]  # fmt: skip


def _score(place: Place, out: Path) -> list[object]:
    src = place.data / "in.jsonl"
    src.write_bytes((FIXTURES / "score" / "worked_example.jsonl").read_bytes().splitlines()[0] + b"\n")
    return ["score", "-i", src, "-o", out, "--workers", "1"]


def _sandbox(place: Place, out: Path) -> list[object]:
    src = place.data / "jobs.jsonl"
    src.write_text(json.dumps(JOB) + "\n")
    return ["sandbox", "run", "--input", src, "--output", out, "--workers", "1"]


WRITERS: dict[str, Callable[[Place, Path], list[object]]] = {
    "mistakes-export": _mistakes,
    "eval-compare": _compare,
    "eval-code": _eval_code,
    "score": _score,
    "sandbox-run": _sandbox,
}
FAST = ["mistakes-export", "eval-compare"]
"""The writers that start no sandbox: the device and FIFO cases run on these."""


def _device(path: Path, minor: int) -> Path:
    """A private character device node: minor 7 is a ``/dev/full``, 3 a ``/dev/null``."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD)")
    return path


def _no_strays(place: Place, *names: str) -> None:
    assert sorted(os.listdir(place.out)) == sorted(names), os.listdir(place.out)
    assert tree(place.cwd) == {}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_symlink_output_is_written_through(
    place: Place, capsys: pytest.CaptureFixture[str], writer: str
) -> None:
    real = place.out / "real.out"
    real.write_text("old\n")
    link = place.out / "link.out"
    link.symlink_to("real.out")
    outcome = run_cli(WRITERS[writer](place, link), capsys)
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err[-2000:]
    assert link.is_symlink() and os.readlink(link) == "real.out"
    assert real.read_text() != "old\n" and real.read_text().endswith("\n")
    _no_strays(place, "link.out", "real.out")


@pytest.mark.parametrize("writer", FAST)
def test_a_full_device_is_one_line_and_stays_a_device(
    place: Place, capsys: pytest.CaptureFixture[str], writer: str
) -> None:
    full = _device(place.out / "full", 7)
    outcome = run_cli(WRITERS[writer](place, full), capsys)
    assert_one_line_error(outcome, str(full), "No space left on device")
    assert stat.S_ISCHR(full.lstat().st_mode)
    _no_strays(place, "full")


@pytest.mark.parametrize("writer", [*FAST, "eval-code"])
def test_a_null_device_is_written_in_place(
    place: Place, capsys: pytest.CaptureFixture[str], writer: str
) -> None:
    null = _device(place.out / "null", 3)
    outcome = run_cli(WRITERS[writer](place, null), capsys)
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err[-2000:]
    assert stat.S_ISCHR(null.lstat().st_mode)
    _no_strays(place, "null")


@pytest.mark.parametrize("writer", FAST)
def test_a_fifo_is_written_in_place(place: Place, capsys: pytest.CaptureFixture[str], writer: str) -> None:
    fifo = place.out / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    outcome = run_cli(WRITERS[writer](place, fifo), capsys)
    reader.join(timeout=30)
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err[-2000:]
    assert got and got[0].endswith(b"\n") and len(got[0]) > 10
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    _no_strays(place, "pipe")


def test_a_symlink_loop_is_one_line(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    loop = place.out / "loop"
    loop.symlink_to("loop")
    outcome = run_cli(WRITERS["mistakes-export"](place, loop), capsys)
    assert_one_line_error(outcome, "a symlink that leads nowhere")
    assert loop.is_symlink()
    _no_strays(place, "loop")
