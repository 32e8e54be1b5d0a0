"""The Mistake Book (method §7): generated tests that broke valid code, replayed on later steps.

Semantics follow the reference: a failure by a valid code adds 1 to the test's frequency (new
entries start there), a pass of a replayed test by a valid code subtracts 1, an entry is removed at
frequency ≤ 0, and each step applies all decrements before all increments. Retrieval returns the
``top_k`` entries of a problem by frequency (ties: the entry inserted first), the same list for every
code of the problem.

Added here (the reference lacks them): a per-problem capacity with eviction (lowest frequency, then
oldest); provenance per entry (step added, last step it broke code, how many code runs it broke,
how many replays it lost); storage of tests as data, ``TestCase(call, predicted)`` plus the oracle
status, where both parts must ``ast.parse`` as expressions (a replayed test is run through the grid
again, so the reference re-validates it; no raw ``repr`` is ever pasted into a program, bug §13.2);
SQLite storage with one transaction per step (a crash mid-step leaves the previous step intact) and
a ``meta`` table holding the last committed step; JSONL export; an off switch for the ablation.
"""

from __future__ import annotations

import ast
import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codea1.types import TestCase

DEFAULT_FILENAME = "mistake_book.sqlite"
"""Name of the book inside a run directory (``RUN_DIR/mistake_book.sqlite``)."""
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""Suffixes of the files SQLite keeps beside a database (write-ahead log, shared memory, rollback)."""
STORABLE_ORACLE = ("valid", "wrong_prediction")
"""Oracle statuses whose tests are stored (the reference produced a value for the call)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    problem_id TEXT NOT NULL,
    call TEXT NOT NULL,
    predicted TEXT NOT NULL,
    oracle_status TEXT NOT NULL,
    frequency INTEGER NOT NULL,
    step_added INTEGER NOT NULL,
    last_hit_step INTEGER NOT NULL,
    codes_broken INTEGER NOT NULL,
    times_passed INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (problem_id, call)
);
CREATE INDEX IF NOT EXISTS entries_rank ON entries (problem_id, frequency DESC, seq ASC);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class MistakeHit:
    """A test and how many times valid codes failed it (or passed it, for replayed tests) this step."""

    test: TestCase
    count: int = 1
    oracle_status: str = "valid"


@dataclass(frozen=True)
class MistakeUpdate:
    """One problem's contribution to a step: generated tests failed, replayed tests passed."""

    problem_id: str
    failed: tuple[MistakeHit, ...] = ()
    passed: tuple[MistakeHit, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "problem_id": self.problem_id,
            "failed": [
                {**h.test.to_dict(), "count": h.count, "oracle": h.oracle_status} for h in self.failed
            ],
            "passed": [
                {**h.test.to_dict(), "count": h.count, "oracle": h.oracle_status} for h in self.passed
            ],
        }


@dataclass(frozen=True)
class MistakeEntry:
    """One stored test with its frequency and provenance."""

    problem_id: str
    call: str
    predicted: str
    oracle_status: str
    frequency: int
    step_added: int
    last_hit_step: int
    codes_broken: int
    times_passed: int

    @property
    def test(self) -> TestCase:
        """The stored test, ready to be run through the grid again."""
        return TestCase(self.call, self.predicted)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (one JSONL line of an export)."""
        return asdict(self)


@dataclass(frozen=True)
class StepReport:
    """What one :meth:`MistakeBook.apply_step` changed."""

    step: int
    added: int = 0
    incremented: int = 0
    decremented: int = 0
    removed: int = 0
    evicted: int = 0
    skipped: int = 0
    """Hits not stored: oracle not usable, or a part that is not a Python expression."""

    def to_dict(self) -> dict[str, int]:
        """Metric form."""
        return asdict(self)


def normalize_expression(text: str) -> str | None:
    """Canonical source of a Python expression, or ``None`` when ``text`` is not one."""
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


class MistakeBook:
    """Per-problem replay store in one SQLite file (the path is chosen by the caller).

    ``enabled=False`` gives the "w/o Mistake Book" ablation: no file is opened, :meth:`retrieve`
    returns no tests and :meth:`apply_step` records nothing.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None, *, enabled: bool = True, top_k: int = 8, capacity: int = 64
    ) -> None:
        if top_k < 0 or capacity < 1:
            raise ValueError(f"top_k must be >= 0 and capacity >= 1, got {top_k}, {capacity}")
        self.enabled = enabled
        self.top_k = top_k
        self.capacity = capacity
        self.path = Path(path) if path is not None else None
        self._conn: sqlite3.Connection | None = None
        if enabled:
            if self.path is None:
                raise ValueError("an enabled Mistake Book needs a database path")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(_SCHEMA)

    # ---- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the database (safe to call twice)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @staticmethod
    def remove_files(path: str | os.PathLike[str]) -> None:
        """Delete a closed book: its database file and SQLite's side files (missing ones are fine).

        A stale ``-wal`` beside a replaced or re-created database would be replayed into it, so the
        side files always go together with the database.
        """
        for suffix in ("", *SQLITE_SIDE_FILES):
            Path(f"{os.fspath(path)}{suffix}").unlink(missing_ok=True)

    def __enter__(self) -> MistakeBook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reading -----------------------------------------------------------------------------------

    @property
    def last_step(self) -> int | None:
        """The last step committed by :meth:`apply_step` (``None`` for a new or disabled book)."""
        if self._conn is None:
            return None
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'last_step'").fetchone()
        return int(row[0]) if row else None

    def retrieve(self, problem_id: str, k: int | None = None) -> list[TestCase]:
        """The top-``k`` tests of a problem by frequency (ties: inserted first); ``k`` defaults to top_k."""
        if self._conn is None:
            return []
        limit = self.top_k if k is None else k
        rows = self._conn.execute(
            "SELECT call, predicted FROM entries WHERE problem_id = ? ORDER BY frequency DESC, seq ASC LIMIT ?",
            (problem_id, limit),
        ).fetchall()
        return [TestCase(call, predicted) for call, predicted in rows]

    def retrieve_many(self, problem_ids: Iterable[str]) -> dict[str, list[TestCase]]:
        """:meth:`retrieve` for several problems (problems without entries map to an empty list)."""
        return {pid: self.retrieve(pid) for pid in problem_ids}

    def entries(self, problem_id: str | None = None) -> list[MistakeEntry]:
        """Stored entries (one problem, or all), ranked as :meth:`retrieve` ranks them."""
        if self._conn is None:
            return []
        cols = ", ".join(MistakeEntry.__dataclass_fields__)
        where, args = ("WHERE problem_id = ?", (problem_id,)) if problem_id is not None else ("", ())
        rows = self._conn.execute(
            f"SELECT {cols} FROM entries {where} ORDER BY problem_id, frequency DESC, seq ASC", args
        ).fetchall()
        return [MistakeEntry(*row) for row in rows]

    def size(self) -> int:
        """Number of stored entries."""
        if self._conn is None:
            return 0
        return int(self._conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def problem_sizes(self) -> list[tuple[str, int, int]]:
        """``(problem_id, entries, total frequency)`` per problem, largest total frequency first."""
        if self._conn is None:
            return []
        rows = self._conn.execute(
            "SELECT problem_id, COUNT(*), SUM(frequency) FROM entries GROUP BY problem_id "
            "ORDER BY SUM(frequency) DESC, problem_id ASC"
        ).fetchall()
        return [(str(p), int(n), int(f)) for p, n, f in rows]

    def export_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write every entry as one JSON line (atomically: temp file, then rename); returns the count."""
        entries = self.entries()
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for e in entries:
                f.write(json.dumps(e.to_dict(), ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        return len(entries)

    # ---- writing -----------------------------------------------------------------------------------

    def apply_step(self, step: int, updates: Sequence[MistakeUpdate]) -> StepReport:
        """Apply one training step's updates in a single transaction and record ``step`` as committed.

        Steps must increase: applying a step at or below :attr:`last_step` raises ``ValueError``
        (so a resumed run cannot count the same step twice).
        """
        if self._conn is None:
            return StepReport(step)
        last = self.last_step
        if last is not None and step <= last:
            raise ValueError(f"Mistake Book already holds step {last}; cannot apply step {step}")
        totals = dict.fromkeys(("added", "incremented", "decremented", "removed", "evicted", "skipped"), 0)
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for update in updates:
                for key, n in self._apply_problem(conn, step, update).items():
                    totals[key] += n
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_step', ?)", (str(step),))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return StepReport(step, **totals)

    def _next_seq(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
        seq = int(row[0]) if row else 0
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_seq', ?)", (str(seq + 1),))
        return seq

    def _apply_problem(self, conn: sqlite3.Connection, step: int, update: MistakeUpdate) -> dict[str, int]:
        """Decrements, then increments, then eviction, for one problem (inside the step's transaction)."""
        out = dict.fromkeys(("added", "incremented", "decremented", "removed", "evicted", "skipped"), 0)
        pid = update.problem_id
        for hit in update.passed:
            call = normalize_expression(hit.test.call)
            if call is None or hit.count <= 0:
                continue
            cur = conn.execute(
                "UPDATE entries SET frequency = frequency - ?, times_passed = times_passed + ? "
                "WHERE problem_id = ? AND call = ?",
                (hit.count, hit.count, pid, call),
            )
            out["decremented"] += cur.rowcount
        out["removed"] += conn.execute(
            "DELETE FROM entries WHERE problem_id = ? AND frequency <= 0", (pid,)
        ).rowcount
        for hit in update.failed:
            call = normalize_expression(hit.test.call)
            predicted = normalize_expression(hit.test.predicted)
            if (
                call is None
                or predicted is None
                or hit.oracle_status not in STORABLE_ORACLE
                or hit.count <= 0
            ):
                out["skipped"] += 1
                continue
            row = conn.execute(
                "SELECT oracle_status FROM entries WHERE problem_id = ? AND call = ?", (pid, call)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
                    (
                        pid,
                        call,
                        predicted,
                        hit.oracle_status,
                        hit.count,
                        step,
                        step,
                        hit.count,
                        self._next_seq(conn),
                    ),
                )
                out["added"] += 1
                continue
            conn.execute(
                "UPDATE entries SET frequency = frequency + ?, codes_broken = codes_broken + ?, "
                "last_hit_step = ? WHERE problem_id = ? AND call = ?",
                (hit.count, hit.count, step, pid, call),
            )
            if row[0] != "valid" and hit.oracle_status == "valid":  # keep a correct prediction when seen
                conn.execute(
                    "UPDATE entries SET predicted = ?, oracle_status = 'valid' WHERE problem_id = ? AND call = ?",
                    (predicted, pid, call),
                )
            out["incremented"] += 1
        excess = conn.execute("SELECT COUNT(*) FROM entries WHERE problem_id = ?", (pid,)).fetchone()[0]
        excess -= self.capacity
        if excess > 0:
            out["evicted"] += conn.execute(
                "DELETE FROM entries WHERE rowid IN (SELECT rowid FROM entries WHERE problem_id = ? "
                "ORDER BY frequency ASC, seq ASC LIMIT ?)",
                (pid, excess),
            ).rowcount
        return out
