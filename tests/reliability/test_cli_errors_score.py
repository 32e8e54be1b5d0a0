"""``codea1 score`` on bad options, bad paths and bad bytes: a bad row costs only itself."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from codea1.limits import max_workers
from codea1.replay import mistake_book
from codea1.replay.mistake_book import MistakeBook

from .reliability_cli import (
    FIXTURES,
    Place,
    assert_one_line_error,
    assert_untouched,
    place_fixture,  # noqa: F401 - the `place` fixture
    run_cli,
    run_process,
    tree,
)

WORKED = (FIXTURES / "score" / "worked_example.jsonl").read_bytes().splitlines()[0]


def _input(place: Place, lines: list[bytes]) -> Path:
    path = place.data / "in.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (["--workers", "-1"], f"--workers must be in [0, {max_workers()}]"),
        (["--alpha", "nan"], "--alpha must be in [0, 1]"),
        (["--no-update"], "--no-update needs --mistake-book"),
    ],
)
def test_bad_option_is_one_line_and_creates_nothing(
    place: Place, capsys: pytest.CaptureFixture[str], option: list[str], needle: str
) -> None:
    src = _input(place, [WORKED])
    before = tree(place.data)
    outcome = run_cli(["score", "--input", src, "--output", place.out / "r.jsonl", *option], capsys)
    assert_one_line_error(outcome, needle)
    assert_untouched(place, before)


def test_output_directory_strands_nothing(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    src = _input(place, [WORKED])
    before = tree(place.data)
    outcome = run_cli(["score", "--input", src, "--output", place.out, "--workers", "1"], capsys)
    assert_one_line_error(outcome, "is a directory")
    assert_untouched(place, before)  # no out.tmp beside it, no results anywhere


def test_input_directory_says_directory(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run_cli(["score", "--input", place.data, "--output", place.out / "r.jsonl"], capsys)
    assert_one_line_error(outcome, "is a directory")
    assert_untouched(place, {})


def test_non_utf8_row_costs_only_that_row(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    lone = json.loads(WORKED)
    lone["id"] = "lone\ud800"
    src = _input(
        place,
        [WORKED, b'{"id": "latin1", "codes": ["caf\xe9"]}', json.dumps(lone).encode(), WORKED],
    )
    before = tree(place.data)
    out = place.out / "r.jsonl"
    outcome = run_cli(["score", "--input", src, "--output", out, "--workers", "1"], capsys)
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err[-2000:]
    assert "scored 2 of 4 line(s), 2 line(s) with errors" in outcome.err
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r.get("id") for r in rows] == ["worked/absolute_sum", "latin1", None, "worked/absolute_sum"]
    assert "bad input line 2: not UTF-8" in rows[1]["error"]
    assert "lone surrogate" in rows[2]["error"]
    assert rows[0] == rows[3] and "error" not in rows[0]
    assert tree(place.data) == before
    assert list(tree(place.out)) == ["r.jsonl"] and tree(place.cwd) == {} and tree(place.tmp) == {}


def test_a_subprocess_run_refuses_an_output_directory(place: Place) -> None:
    src = _input(place, [WORKED])
    before = tree(place.data)
    outcome = run_process(["score", "--input", src, "--output", place.out], place.cwd, tmpdir=place.tmp)
    assert_one_line_error(outcome, "is a directory")
    assert_untouched(place, before)


def test_stdin_with_bad_bytes_costs_only_that_row(place: Place) -> None:
    stdin = WORKED + b"\n" + b'{"id": "bin\xff"}\n' + WORKED + b"\n"
    outcome = run_process(
        ["score", "--input", "-", "--output", "-", "--workers", "1"], place.cwd, tmpdir=place.tmp, stdin=stdin
    )
    assert outcome.code == 0 and "Traceback" not in outcome.err, outcome.err[-2000:]
    rows = [json.loads(line) for line in outcome.out.splitlines()]
    assert len(rows) == 3 and "not UTF-8" in rows[1]["error"] and "error" not in rows[2]
    assert tree(place.cwd) == {} and tree(place.tmp) == {}


def test_every_line_an_error_row_exits_1_like_sandbox_run(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35, item 7: ``score`` exited 0 when no line could be scored (``sandbox run`` exits 1)."""
    src = _input(place, [b"not json", b'{"id": "x"}'])
    out, book = place.out / "r.jsonl", place.out / "mb.sqlite"
    outcome = run_cli(
        ["score", "--input", src, "--output", out, "--mistake-book", book, "--workers", "1"], capsys
    )
    assert outcome.code == 1 and "Traceback" not in outcome.err, outcome.err[-2000:]
    assert (
        "every one of the 2 line(s) is an error row" in outcome.err and "no Mistake Book step" in outcome.err
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all("error" in r for r in rows)
    with MistakeBook(book, read_only=True) as b:
        assert b.last_step is None  # nothing scored, nothing recorded


def test_a_book_in_a_missing_directory_is_refused(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 35, item 10: ``--mistake-book no/such/mb.sqlite`` created the folders and exited 0; a
    missing parent of an output is an error everywhere else."""
    src = _input(place, [WORKED])
    before = tree(place.data)
    book = place.out / "no" / "such" / "mb.sqlite"
    outcome = run_cli(
        ["score", "--input", src, "--output", place.out / "r.jsonl", "--mistake-book", book], capsys
    )
    assert_one_line_error(outcome, "--mistake-book", "does not exist")
    assert_untouched(place, before)


def _lock(path: Path) -> sqlite3.Connection:
    """Another writer holding ``path``'s write lock (as a training run or another ``score`` would)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_a_locked_book_is_refused_before_anything_is_written(
    place: Place, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35, item 6: a book another process writes was a ``database is locked`` traceback after
    the output had been written, and the step was lost."""
    monkeypatch.setattr(mistake_book, "LOCK_WAIT_S", 0.05, raising=False)
    src = _input(place, [WORKED])
    book = place.data / "mb.sqlite"
    MistakeBook(book).close()
    before = tree(place.data)
    holder = _lock(book)
    try:
        outcome = run_cli(["score", "--input", src, "--output", place.out / "r.jsonl", "--mistake-book", book,
                           "--workers", "1"], capsys)  # fmt: skip
    finally:
        holder.close()
    assert_one_line_error(outcome, "--mistake-book", "database is locked", "another process")
    assert tree(place.out) == {} and tree(place.tmp) == {}
    with MistakeBook(book, read_only=True) as b:
        assert b.last_step is None
    assert sorted(tree(place.data)) == sorted(before)


def test_a_book_locked_while_scoring_writes_neither_output_nor_step(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock taken by another writer after the open: the output is dropped with the step."""
    from codea1.cli import CliError
    from codea1.cli.score import write_and_record

    monkeypatch.setattr(mistake_book, "LOCK_WAIT_S", 0.05)
    path, out = place.data / "mb.sqlite", place.out / "r.jsonl"
    with MistakeBook(path) as book:
        holder = _lock(path)
        try:
            with pytest.raises(CliError, match="database is locked.*nothing was written"):
                write_and_record(str(out), [{"id": "x"}], book, [])
        finally:
            holder.close()
        assert book.last_step is None
        assert write_and_record(str(out), [{"id": "x"}], book, []).step == 1  # once free, both
    assert json.loads(out.read_text()) == {"id": "x"}


def test_a_book_that_cannot_be_written_is_refused_before_anything_is_written(
    place: Place, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35, item 6: a book on a read-only file system was a traceback after the output had been
    written. Simulated: every writing connection is opened read-only (as SQLite opens a file it may
    not write), since a read-only mount needs privileges."""
    src = _input(place, [WORKED])
    book = place.data / "mb.sqlite"
    MistakeBook(book).close()
    connect = sqlite3.connect

    def read_only(database: object, *args: object, uri: bool = False, **kwargs: object) -> sqlite3.Connection:
        if uri:
            return connect(database, *args, uri=True, **kwargs)
        return connect(f"file:{database}?mode=ro", *args, uri=True, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", read_only)
    outcome = run_cli(["score", "--input", src, "--output", place.out / "r.jsonl", "--mistake-book", book,
                       "--workers", "1"], capsys)  # fmt: skip
    assert_one_line_error(outcome, "--mistake-book", "cannot write the Mistake Book", "readonly")
    assert tree(place.out) == {} and tree(place.tmp) == {}
