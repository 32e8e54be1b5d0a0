"""Mistake Book semantics (docs/algorithm.md, items 19–23) and what we add: capacity, provenance,
safe storage, SQLite."""

from __future__ import annotations

import json
import sqlite3

import pytest

from codea1.replay.mistake_book import MistakeBook, MistakeHit, MistakeUpdate
from codea1.types import TestCase


def hit(call: str, count: int = 1, predicted: str = "0", status: str = "valid") -> MistakeHit:
    return MistakeHit(TestCase(call, predicted), count, status)


def freqs(book: MistakeBook, pid: str = "p") -> dict[str, int]:
    return {e.call: e.frequency for e in book.entries(pid)}


@pytest.fixture
def book(tmp_path):
    with MistakeBook(tmp_path / "run" / "mistake_book.sqlite", top_k=3, capacity=5) as b:
        yield b


def test_failures_add_passes_subtract_and_zero_removes(book):
    book.apply_step(1, [MistakeUpdate("p", failed=(hit("f(1)", 3), hit("f(2)")))])
    assert freqs(book) == {"f(1)": 3, "f(2)": 1}
    report = book.apply_step(2, [MistakeUpdate("p", passed=(hit("f(1)"), hit("f(2)"), hit("f(9)")))])
    assert freqs(book) == {"f(1)": 2}
    assert (report.decremented, report.removed) == (2, 1)
    book.apply_step(3, [MistakeUpdate("p", passed=(hit("f(1)", 5),))])
    assert freqs(book) == {}  # removed at <= 0, never negative


def test_decrement_happens_before_increment(book):
    book.apply_step(1, [MistakeUpdate("p", failed=(hit("f(1)"),))])
    # passed once (1 → 0: removed) then failed once (re-added at 1, as a new entry of step 2)
    book.apply_step(2, [MistakeUpdate("p", failed=(hit("f(1)"),), passed=(hit("f(1)"),))])
    (e,) = book.entries("p")
    assert (e.frequency, e.step_added, e.codes_broken) == (1, 2, 1)


def test_top_k_by_frequency_ties_to_first_inserted_same_for_every_code(book):
    book.apply_step(1, [MistakeUpdate("p", failed=(hit("f(1)"), hit("f(2)", 2), hit("f(3)"), hit("f(4)")))])
    assert [t.call for t in book.retrieve("p")] == ["f(2)", "f(1)", "f(3)"]
    assert [t.call for t in book.retrieve("p", k=10)] == ["f(2)", "f(1)", "f(3)", "f(4)"]
    book.apply_step(2, [MistakeUpdate("p", failed=(hit("f(4)", 2),))])
    assert [t.call for t in book.retrieve("p")] == ["f(4)", "f(2)", "f(1)"]
    assert book.retrieve("unknown") == []
    assert book.retrieve_many(["p", "q"])["q"] == []


def test_capacity_evicts_lowest_frequency_then_oldest(book):
    book.apply_step(
        1,
        [
            MistakeUpdate(
                "p", failed=(hit("f(1)", 2), hit("f(2)"), hit("f(3)", 2), hit("f(4)"), hit("f(5)", 2))
            )
        ],
    )
    report = book.apply_step(2, [MistakeUpdate("p", failed=(hit("f(6)", 3), hit("f(7)")))])
    assert report.evicted == 2
    # the two frequency-1 entries of step 1 (f(2), f(4)) go; f(7) (newer, also 1) stays
    assert set(freqs(book)) == {"f(1)", "f(3)", "f(5)", "f(6)", "f(7)"}
    book.apply_step(3, [MistakeUpdate("p", failed=(hit("f(8)"),))])
    assert "f(7)" not in freqs(book) and "f(8)" in freqs(book)  # tie at 1: the older one goes


def test_provenance_is_recorded(book):
    book.apply_step(4, [MistakeUpdate("p", failed=(hit("f(1)", 2),))])
    book.apply_step(6, [MistakeUpdate("p", failed=(hit("f(1)", 3),), passed=(hit("f(1)"),))])
    (e,) = book.entries("p")
    assert (e.step_added, e.last_hit_step, e.codes_broken, e.times_passed, e.frequency) == (4, 6, 5, 1, 4)


def test_only_replayable_tests_are_stored(book):
    report = book.apply_step(
        1,
        [
            MistakeUpdate(
                "p",
                failed=(
                    hit("f( 1 )", predicted="[1,  2]"),  # normalised
                    hit("f(2)", status="invalid"),  # oracle not usable
                    hit("f(", predicted="1"),  # not an expression
                    hit("f(3)", predicted="<__main__.Node object at 0x7f>"),  # bug R2: not Python
                    hit("f(4)", predicted="1); import os; (2", status="valid"),
                    hit("f(5)", predicted="9", status="wrong_prediction"),
                ),
            )
        ],
    )
    assert report.skipped == 4 and report.added == 2
    entries = {e.call: e for e in book.entries("p")}
    assert entries["f(1)"].predicted == "[1, 2]"
    assert entries["f(5)"].oracle_status == "wrong_prediction"
    # the same call seen later with a correct prediction upgrades the stored one
    book.apply_step(2, [MistakeUpdate("p", failed=(hit("f(5)", predicted="10"),))])
    e = book.entries("p")[0] if book.entries("p")[0].call == "f(5)" else book.entries("p")[1]
    assert (e.predicted, e.oracle_status, e.frequency) == ("10", "valid", 2)


def test_steps_must_increase_and_survive_reopening(tmp_path):
    path = tmp_path / "mb.sqlite"
    with MistakeBook(path) as b:
        assert b.last_step is None
        b.apply_step(3, [MistakeUpdate("p", failed=(hit("f(1)"),))])
        with pytest.raises(ValueError, match="already holds step 3"):
            b.apply_step(3, [])
    with MistakeBook(path) as b:
        assert b.last_step == 3 and [t.call for t in b.retrieve("p")] == ["f(1)"]
        b.apply_step(4, [])
        assert b.last_step == 4


def test_an_error_mid_step_rolls_back_everything(book, monkeypatch):
    book.apply_step(1, [MistakeUpdate("p", failed=(hit("f(1)"),))])
    real = MistakeBook._apply_problem

    def flaky(self, conn, step, update):
        if update.problem_id == "q":
            raise RuntimeError("disk on fire")
        return real(self, conn, step, update)

    monkeypatch.setattr(MistakeBook, "_apply_problem", flaky)
    with pytest.raises(RuntimeError):
        book.apply_step(2, [MistakeUpdate("p", failed=(hit("f(1)"), hit("f(2)"))), MistakeUpdate("q")])
    assert freqs(book) == {"f(1)": 1} and book.last_step == 1


def test_disabled_book_records_and_returns_nothing(tmp_path):
    path = tmp_path / "off.sqlite"
    b = MistakeBook(path, enabled=False)
    report = b.apply_step(1, [MistakeUpdate("p", failed=(hit("f(1)"),))])
    assert report.added == 0 and b.retrieve("p") == [] and b.size() == 0 and b.last_step is None
    assert not path.exists()
    with pytest.raises(ValueError):
        MistakeBook(None)


def test_export_jsonl_and_summaries(book, tmp_path):
    book.apply_step(
        1,
        [MistakeUpdate("p", failed=(hit("f(1)", 2),)), MistakeUpdate("q", failed=(hit("f(7)"), hit("f(8)")))],
    )
    out = tmp_path / "mb.jsonl"
    assert book.export_jsonl(out) == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["problem_id"] for r in rows} == {"p", "q"}
    assert set(rows[0]) >= {"call", "predicted", "oracle_status", "frequency", "step_added", "codes_broken"}
    assert book.size() == 3
    assert book.problem_sizes() == [("p", 1, 2), ("q", 2, 2)]
    assert not out.with_name("mb.jsonl.tmp").exists()


def test_meta_table_is_plain_sqlite(book):
    book.apply_step(7, [])
    conn = sqlite3.connect(str(book.path))
    assert conn.execute("SELECT value FROM meta WHERE key = 'last_step'").fetchone() == ("7",)
    conn.close()


def test_remove_files_deletes_the_database_and_its_side_files(tmp_path):
    path = tmp_path / "book.sqlite"
    with MistakeBook(path) as b:
        b.apply_step(1, [MistakeUpdate("p", failed=(hit("f(1)"),))])
    for suffix in ("-wal", "-shm", "-journal"):
        (tmp_path / f"book.sqlite{suffix}").write_bytes(b"stale")
    (tmp_path / "other.sqlite-wal").write_bytes(b"not ours")
    MistakeBook.remove_files(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite-wal"]
    MistakeBook.remove_files(path)  # nothing left to remove is fine
