"""An output that is the same file as an input (the same path, a symlink or a hard link) is refused
in one line with exit 2, before anything is opened for writing: the input stays byte for byte."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from codea1.cli import main

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
