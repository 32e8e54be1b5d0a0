"""A Mistake Book is recognised by its own mark before anything is written: ``mistakes inspect``,
``mistakes export`` and ``score --mistake-book`` refuse every other file in one line (exit 2) and
leave it byte-identical; inspection opens read-only and creates no side files; a book from before
the mark is read as it is and marked on its first writing open."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.replay.mistake_book import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    BookFileError,
    MistakeBook,
    MistakeHit,
    MistakeUpdate,
    recognise_book,
)
from codea1.types import TestCase

from .run_dirs import assert_one_line_error, snapshot

# the schema of books written before the mark existed (no application_id, no user_version)
UNMARKED_SCHEMA = """
CREATE TABLE entries (problem_id TEXT NOT NULL, call TEXT NOT NULL, predicted TEXT NOT NULL,
    oracle_status TEXT NOT NULL, frequency INTEGER NOT NULL, step_added INTEGER NOT NULL,
    last_hit_step INTEGER NOT NULL, codes_broken INTEGER NOT NULL, times_passed INTEGER NOT NULL,
    seq INTEGER NOT NULL, PRIMARY KEY (problem_id, call));
CREATE INDEX entries_rank ON entries (problem_id, frequency DESC, seq ASC);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO entries VALUES ('p', 'f(1)', '2', 'valid', 3, 1, 1, 3, 0, 0);
INSERT INTO meta VALUES ('last_step', '1'), ('next_seq', '1');
"""

SCORE_LINE = {
    "id": "p1", "entry_point": "add", "reference": "def add(a, b):\n    return a + b\n",
    "codes": ["```python\ndef add(a, b):\n    return a - b\n```"],
    "suites": [["```python\nassert add(1, 2) == 3\nassert add(2, 2) == 4\n```"]],
}  # fmt: skip


def make_book(path: Path, problems: int = 2) -> None:
    with MistakeBook(path, capacity=1000) as book:
        book.apply_step(
            1,
            [
                MistakeUpdate(f"P/{i}", failed=(MistakeHit(TestCase(f"f({i})", "0"), 1 + i % 3),))
                for i in range(problems)
            ],
        )


def foreign_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()


def other_application(path: Path) -> None:
    foreign_sqlite(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA application_id = 1234")
    conn.close()


def corrupt_book(path: Path) -> None:
    make_book(path, problems=300)
    data = bytearray(path.read_bytes())
    data[4096:8192] = b"\xa5" * 4096  # a page of the entries table overwritten
    path.write_bytes(bytes(data))


def newer_book(path: Path) -> None:
    make_book(path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()


FOREIGN = {
    "empty file": (lambda p: p.write_bytes(b""), "an empty file"),
    "jsonl file": (lambda p: p.write_text('{"id": "x"}\n'), "not an SQLite database"),
    "foreign sqlite": (foreign_sqlite, "an SQLite database with notes"),
    "other application": (other_application, "another application"),
    "corrupt book": (corrupt_book, "corrupt"),
    "truncated book": (lambda p: (make_book(p), p.write_bytes(p.read_bytes()[:5000])), "corrupt"),
    "newer schema": (newer_book, "newer than this codea1 reads"),
}


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    return here


@pytest.fixture(params=sorted(FOREIGN))
def foreign(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    folder = tmp_path / "files"
    folder.mkdir()
    path = folder / "book.sqlite"
    make, needle = FOREIGN[request.param]
    make(path)
    return path, needle


def run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_inspect_refuses_a_foreign_file_and_leaves_it_alone(foreign, cwd, capsys) -> None:
    path, needle = foreign
    before = snapshot(path.parent)
    code, _, err = run_cli(capsys, "mistakes", "inspect", str(path))
    assert_one_line_error(code, err, needle, str(path))
    assert snapshot(path.parent) == before and not list(cwd.iterdir())


def test_inspect_of_a_run_dir_holding_a_foreign_book(foreign, cwd, capsys) -> None:
    path, needle = foreign
    path.rename(path.with_name("mistake_book.sqlite"))
    before = snapshot(path.parent)
    code, _, err = run_cli(capsys, "mistakes", "inspect", str(path.parent))
    assert_one_line_error(code, err, needle)
    assert snapshot(path.parent) == before


def test_export_refuses_a_foreign_file_and_writes_nothing(foreign, cwd, capsys) -> None:
    path, needle = foreign
    before = snapshot(path.parent)
    code, _, err = run_cli(capsys, "mistakes", "export", str(path), "-o", str(cwd / "out.jsonl"))
    assert_one_line_error(code, err, needle)
    assert snapshot(path.parent) == before and not list(cwd.iterdir())


@pytest.mark.parametrize("no_update", [False, True])
def test_score_refuses_a_foreign_book_before_writing_anything(foreign, cwd, capsys, no_update) -> None:
    path, needle = foreign
    (cwd / "in.jsonl").write_text(json.dumps(SCORE_LINE) + "\n")
    before = snapshot(path.parent)
    argv = ["score", "-i", "in.jsonl", "-o", "out.jsonl", "--mistake-book", str(path), "--workers", "1"]
    code, _, err = run_cli(capsys, *argv, *(["--no-update"] if no_update else []))
    assert_one_line_error(code, err, "--mistake-book", needle)
    assert snapshot(path.parent) == before
    assert sorted(p.name for p in cwd.iterdir()) == ["in.jsonl"]


def test_inspect_reads_a_book_without_changing_it_or_leaving_side_files(tmp_path, cwd, capsys) -> None:
    path = tmp_path / "run" / "mistake_book.sqlite"
    make_book(path)
    before = snapshot(path.parent)
    code, out, err = run_cli(capsys, "mistakes", "inspect", str(path.parent))
    assert code == 0 and err == "" and "entries: 2 across 2 problem(s)" in out
    code, out, err = run_cli(capsys, "mistakes", "export", str(path), "-o", str(cwd / "mb.jsonl"))
    assert code == 0 and len((cwd / "mb.jsonl").read_text().splitlines()) == 2
    assert snapshot(path.parent) == before  # no -wal, -shm or -journal, not a byte changed


def test_score_creates_a_marked_book_where_none_exists_and_no_update_is_read_only(cwd, capsys) -> None:
    (cwd / "in.jsonl").write_text(json.dumps(SCORE_LINE) + "\n")
    argv = ["score", "-i", "in.jsonl", "-o", "out.jsonl", "--mistake-book", "mb.sqlite", "--workers", "1"]
    code, _, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert recognise_book(cwd / "mb.sqlite") == "marked"
    with MistakeBook(cwd / "mb.sqlite", read_only=True) as book:
        assert book.last_step == 1 and book.size() >= 1
    before = snapshot(cwd)
    code, _, err = run_cli(capsys, *argv, "--no-update")
    assert code == 0, err
    after = snapshot(cwd)
    assert {k: v for k, v in after.items() if k != "out.jsonl"} == {
        k: v for k, v in before.items() if k != "out.jsonl"
    }
    code, _, err = run_cli(capsys, *argv[:-4], "--mistake-book", "absent.sqlite", "--no-update")
    assert_one_line_error(code, err, "no Mistake Book at absent.sqlite")
    assert not (cwd / "absent.sqlite").exists()


def test_a_book_from_before_the_mark_is_read_as_is_and_marked_on_writing(tmp_path, capsys) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(UNMARKED_SCHEMA)
    conn.close()
    before = path.read_bytes()
    assert recognise_book(path) == "unmarked"
    code, out, _ = run_cli(capsys, "mistakes", "inspect", str(path))
    assert code == 0 and "last step: 1" in out and "assert f(1) == 2" in out
    assert path.read_bytes() == before  # read-only opens leave it unmarked
    with MistakeBook(path) as book:  # a writing open (train, score) marks it and keeps its entries
        assert book.size() == 1 and book.last_step == 1
        book.apply_step(2, [])
    assert recognise_book(path) == "marked"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


def test_a_writing_open_refuses_a_foreign_file_too(foreign) -> None:
    path, needle = foreign
    before = path.read_bytes()
    with pytest.raises(BookFileError, match=needle):
        MistakeBook(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["book.sqlite"]


def test_inspect_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    path = tmp_path / "big.sqlite"
    make_book(path, problems=3000)  # far more output than a pipe buffer holds
    cmd = [sys.executable, "-m", "codea1", "mistakes", "inspect", str(path), "--top", "3000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"mistake book:")
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert err == ""


@pytest.mark.parametrize("argv", [["--top", "-1"], ["--samples", "-2"]])
def test_inspect_refuses_negative_counts(tmp_path, capsys, argv) -> None:
    path = tmp_path / "mb.sqlite"
    make_book(path)
    code, _, err = run_cli(capsys, "mistakes", "inspect", str(path), *argv)
    assert_one_line_error(code, err, ">= 0")


def test_export_refuses_a_bad_output_before_opening_anything(tmp_path, cwd, capsys) -> None:
    path = tmp_path / "mb.sqlite"
    make_book(path)
    before = snapshot(tmp_path)
    for out, needle in [(tmp_path, "is a directory"), (tmp_path / "no" / "x.jsonl", "does not exist"),
                        (path, "is the same file as the Mistake Book")]:  # fmt: skip
        code, _, err = run_cli(capsys, "mistakes", "export", str(path), "-o", str(out))
        assert_one_line_error(code, err, needle)
    assert snapshot(tmp_path) == before


def test_inspect_reads_a_book_a_training_run_holds_open(tmp_path, capsys) -> None:
    path = tmp_path / "mistake_book.sqlite"
    with MistakeBook(path) as live:  # the writer keeps its -wal and -shm while open
        live.apply_step(1, [MistakeUpdate("p", failed=(MistakeHit(TestCase("f(1)", "2")),))])
        live.apply_step(2, [MistakeUpdate("q", failed=(MistakeHit(TestCase("g(1)", "3")),))])
        code, out, err = run_cli(capsys, "mistakes", "inspect", str(tmp_path))
        assert code == 0 and err == "" and "last step: 2" in out and "entries: 2" in out
        live.apply_step(3, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mistake_book.sqlite"]
