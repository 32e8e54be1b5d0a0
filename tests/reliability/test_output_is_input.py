"""An output that is the same file as an input (the same path, a symlink or a hard link) is refused
in one line with exit 2, before anything is opened for writing: the input stays byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from codea1.cli import main

from .reliability_cli import cli_env

ROW = {"id": "u", "reference": "def add(a, b):\n    return a + b\n", "entry_point": "add",
       "codes": ["def add(a, b):\n    return a + b\n"], "tests": [{"call": "add(1, 2)", "predicted": "3"}]}  # fmt: skip
RECORDS = '{"run_key": {"model": "m"}}\n{"id": "p", "source": "s", "n": 1, "correct": [true]}\n'


def _same(path: Path) -> Path:
    return path


def _symlink(path: Path) -> Path:
    link = path.with_name("link-" + path.name)
    link.symlink_to(path)
    return link


def _hardlink(path: Path) -> Path:
    link = path.with_name("hard-" + path.name)
    os.link(path, link)
    return link


ALIASES = [_same, _symlink, _hardlink]


def _refused(capsys: pytest.CaptureFixture[str], args: list[str], kept: Path, what: str) -> None:
    before = kept.read_bytes()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "is the same file as" in err and what in err and "Traceback" not in err and err.count("\n") == 1
    assert kept.read_bytes() == before


@pytest.mark.parametrize("alias", ALIASES)
def test_sandbox_run(tmp_path: Path, capsys, alias: Callable[[Path], Path]) -> None:
    f = tmp_path / "F.jsonl"
    f.write_text(json.dumps(ROW) + "\n")
    _refused(capsys, ["sandbox", "run", "--input", str(f), "--output", str(alias(f))], f, "--input")


@pytest.mark.parametrize("alias", ALIASES)
def test_score_output_and_book(tmp_path: Path, capsys, alias: Callable[[Path], Path]) -> None:
    f = tmp_path / "F.jsonl"
    f.write_text(json.dumps(ROW) + "\n")
    _refused(capsys, ["score", "-i", str(f), "-o", str(alias(f))], f, "--input")
    book = tmp_path / "B.sqlite"
    book.write_bytes(b"not yet a book")
    _refused(capsys, ["score", "-i", str(f), "-o", str(alias(book)), "--mistake-book", str(book)], book,
             "--mistake-book")  # fmt: skip


@pytest.mark.parametrize("alias", ALIASES)
def test_eval_code_samples(tmp_path: Path, capsys, alias: Callable[[Path], Path]) -> None:
    s = tmp_path / "S.jsonl"
    s.write_text('{"task_id": "demo/count_vowels", "completion": "x"}\n')
    args = ["eval", "code", "--data", "demo:heldout", "--samples", str(s), "--output", str(alias(s)),
            "--results-dir", str(tmp_path / "res")]  # fmt: skip
    _refused(capsys, args, s, "--samples")


@pytest.mark.parametrize("alias", ALIASES)
def test_eval_compare(tmp_path: Path, capsys, alias: Callable[[Path], Path]) -> None:
    a, b = tmp_path / "A.jsonl", tmp_path / "B.jsonl"
    a.write_text(RECORDS)
    b.write_text(RECORDS)
    _refused(capsys, ["eval", "compare", str(a), str(b), "--output", str(alias(a))], a, "before")


def _piped(argv: list[str], stdin: Path, stdout: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """``python -m codea1 argv`` with standard input read from ``stdin`` (and output appended to ``stdout``)."""
    with open(stdin, "rb") as src, open(stdout or os.devnull, "ab") as dst:
        return subprocess.run([sys.executable, "-m", "codea1", *argv], stdin=src, stdout=dst,
                              stderr=subprocess.PIPE, cwd=stdin.parent, env=cli_env(), timeout=120)  # fmt: skip


@pytest.mark.parametrize("verb", [["sandbox", "run"], ["score"]])
@pytest.mark.parametrize("output", ["/proc/self/fd/0", "F.jsonl", "-"])
def test_standard_streams_redirected_to_the_other_end(tmp_path: Path, verb: list[str], output: str) -> None:
    """Issue 35, item 4: ``--input - --output /proc/self/fd/0 < F.jsonl`` overwrote F.jsonl (the check
    compared paths only, and ``-`` was never a file); so did ``--input F.jsonl --output - >> F.jsonl``."""
    f = tmp_path / "F.jsonl"
    f.write_text(json.dumps(ROW) + "\n")
    before = f.read_bytes()
    argv = [*verb, "--input", "F.jsonl" if output == "-" else "-", "--output", output, "--workers", "1"]
    proc = _piped(argv, f, stdout=f if output == "-" else None)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "is the same file as --input" in err and "Traceback" not in err and err.count("\n") == 1, err
    assert f.read_bytes() == before


def test_standard_input_from_another_file_is_fine(tmp_path: Path) -> None:
    f = tmp_path / "F.jsonl"
    f.write_text(json.dumps(ROW) + "\n")
    proc = _piped(["sandbox", "run", "--input", "-", "--output", "R.jsonl", "--workers", "1"], f)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads((tmp_path / "R.jsonl").read_text())["id"] == "u"
