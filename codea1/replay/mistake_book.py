"""The Mistake Book (docs/algorithm.md, items 19–23): generated tests that broke valid code, replayed
on later steps.

Semantics follow the reference: a failure by a valid code adds 1 to the test's frequency (new
entries start there), a pass of a replayed test by a valid code subtracts 1, an entry is removed at
frequency ≤ 0, and each step applies all decrements before all increments. A replayed test is run
through the grid again, so the test-scope rules of the day judge it (docs/sandbox.md, "Tests judge
behaviour only"): one they refuse (``MistakeUpdate.rejected``) is removed from the book at once. Retrieval returns the
``top_k`` entries of a problem by frequency (ties: the entry inserted first), the same list for every
code of the problem.

Added here (the reference lacks them): a per-problem capacity with eviction (lowest frequency, then
oldest); provenance per entry (step added, last step it broke code, how many code runs it broke,
how many replays it lost); storage of tests as data, ``TestCase(call, predicted)`` plus the oracle
status, where both parts must ``ast.parse`` as expressions (a replayed test is run through the grid
again, so the reference re-validates it; no raw ``repr`` is ever pasted into a program, bug R2);
SQLite storage with one transaction per step (a crash mid-step leaves the previous step intact) and
a ``meta`` table holding the last committed step; JSONL export; an off switch for the ablation.

A book file carries its own mark: ``PRAGMA application_id`` = :data:`APPLICATION_ID` and
``PRAGMA user_version`` = :data:`SCHEMA_VERSION`. Before anything is written, an existing file is
read (read-only) and recognised; an empty file, a file that is not SQLite, another program's
database, a corrupt database or a book from a newer schema raises :class:`BookFileError` and the
file is left byte-identical. Books written before the mark existed (application_id 0 and exactly
codea1's ``entries``/``meta`` tables) are recognised by their tables: read-only opens leave them as
they are, the first writing open stamps the mark. A new book is built under a temporary name and
linked into place, so the path never holds a half-made book. ``read_only=True`` opens through an
SQLite ``mode=ro`` URI (``immutable`` when no writer's ``-wal`` file is present, so inspection
creates no side files).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import sqlite3
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from codea1.types import TestCase

DEFAULT_FILENAME = "mistake_book.sqlite"
"""Name of the book inside a run directory (``RUN_DIR/mistake_book.sqlite``)."""
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""Suffixes of the files SQLite keeps beside a database (write-ahead log, shared memory, rollback)."""
STORABLE_ORACLE = ("valid", "wrong_prediction")
"""Oracle statuses whose tests are stored (the reference produced a value for the call)."""
APPLICATION_ID = int.from_bytes(b"CA1B", "big")
"""``PRAGMA application_id`` of every Mistake Book file."""
SCHEMA_VERSION = 1
"""``PRAGMA user_version`` of the book schema this code reads and writes."""
LOCK_WAIT_S = 5.0
"""How long a writer waits for another process's write lock on the book before giving up."""
_SQLITE_MAGIC = b"SQLite format 3\x00"
_ENTRY_COLUMNS = (
    "problem_id", "call", "predicted", "oracle_status", "frequency", "step_added",
    "last_hit_step", "codes_broken", "times_passed", "seq",
)  # fmt: skip

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


class BookFileError(ValueError):
    """A path that does not hold a usable Mistake Book; the message says what it holds instead."""


class BookWriteError(OSError):
    """A Mistake Book that cannot be written now (locked by another process, a read-only file system,
    a full disk); nothing of the step was recorded. ``filename`` is the book, ``strerror`` the reason."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(None, reason, os.fspath(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


BookKind = Literal["missing", "marked", "unmarked"]
"""What :func:`recognise_book` found: no file, a book with the mark, a book from before the mark."""


def read_only_uri(path: str | os.PathLike[str]) -> str:
    """An SQLite URI that opens ``path`` read-only without creating side files.

    ``immutable=1`` (no locks, no ``-shm``/``-wal`` created) when no ``-wal`` file is present, that
    is when no writer holds the database; otherwise plain ``mode=ro``, reading through the writer's
    own write-ahead log.
    """
    absolute = os.path.abspath(os.fspath(path))
    live = os.path.exists(absolute + "-wal")
    return f"file:{urllib.request.pathname2url(absolute)}?mode=ro" + ("" if live else "&immutable=1")


def recognise_book(path: str | os.PathLike[str]) -> BookKind:
    """Say whether ``path`` holds a Mistake Book, reading it read-only (nothing is written).

    Raises :class:`BookFileError` naming what the file is when it is not a usable book: a directory,
    an empty file, not SQLite, another program's SQLite database, a corrupt database, or a book of a
    newer schema than :data:`SCHEMA_VERSION`.
    """
    p = Path(path)
    if not p.exists():
        return "missing"
    if not p.is_file():
        raise BookFileError(f"{p} is not a Mistake Book (not a regular file)")
    try:
        with open(p, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise BookFileError(f"{p}: cannot read ({e.strerror or e})") from None
    if not head:
        raise BookFileError(f"{p} is not a Mistake Book (an empty file)")
    if head != _SQLITE_MAGIC:
        raise BookFileError(f"{p} is not a Mistake Book (not an SQLite database)")
    try:
        conn = sqlite3.connect(read_only_uri(p), uri=True)
    except sqlite3.Error as e:
        raise BookFileError(f"{p}: cannot open the database ({e})") from None
    try:
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        columns = tuple(r[1] for r in conn.execute("PRAGMA table_info(entries)"))
        problems = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.Error as e:
        raise BookFileError(f"{p} is not a usable Mistake Book (corrupt SQLite database: {e})") from None
    finally:
        conn.close()
    if problems != ["ok"]:
        raise BookFileError(f"{p} is not a usable Mistake Book (corrupt SQLite database: {problems[0]})")
    if app_id == APPLICATION_ID:
        if version > SCHEMA_VERSION:
            raise BookFileError(
                f"{p}: Mistake Book schema version {version} is newer than this codea1 reads "
                f"({SCHEMA_VERSION}); upgrade codea1"
            )
        return "marked"
    if app_id != 0:
        raise BookFileError(
            f"{p} is not a Mistake Book (an SQLite database of another application, id {app_id:#010x})"
        )
    if tables == {"entries", "meta"} and columns == _ENTRY_COLUMNS:
        return "unmarked"
    shown = ", ".join(sorted(tables)[:5]) or "no tables"
    raise BookFileError(f"{p} is not a Mistake Book (an SQLite database with {shown})")


def _write_reason(e: sqlite3.Error) -> str:
    """SQLite's reason for a failed write, with what it means for a lock."""
    text = str(e)
    if "locked" in text or "busy" in text:
        return f"{text}: another process is writing it; wait for it to finish or give another book"
    return text


def _create_book(path: Path) -> None:
    """Build an empty, marked book under a temporary name and link it to ``path`` (never half-made)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BookWriteError(path, f"cannot create a Mistake Book there ({e.strerror or e})") from None
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        _remove_with_side_files(tmp)
        # Built with a rollback journal (the open switches to WAL): every write lands in the file or
        # raises, where in WAL a close that cannot fold the log in (a full disk) fails silently.
        conn = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.executescript(_SCHEMA)
        finally:
            conn.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        try:
            made = recognise_book(tmp)
        except BookFileError:
            made = "missing"
        if made != "marked":
            raise OSError(0, "the new book did not read back whole")
        _link_new(tmp, path)
    except (OSError, sqlite3.Error) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise BookWriteError(path, f"cannot create a Mistake Book there ({reason})") from None
    finally:
        with contextlib.suppress(OSError):  # a read-only file system refuses even a missing file's unlink
            _remove_with_side_files(tmp)


def _remove_with_side_files(path: Path) -> None:
    for side in ("", *SQLITE_SIDE_FILES):
        Path(str(path) + side).unlink(missing_ok=True)


def _link_new(tmp: Path, path: Path) -> None:
    """Give the finished file ``tmp`` the name ``path``, never replacing a file that appeared there."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise BookFileError(f"{path}: created by another process while this one was creating it") from None
    except OSError:  # a file system without hard links: rename, after checking the name is free
        if path.exists():
            raise BookFileError(
                f"{path}: created by another process while this one was creating it"
            ) from None
        os.rename(tmp, path)


@dataclass(frozen=True)
class MistakeHit:
    """A test and how many times valid codes failed it (or passed it, for replayed tests) this step."""

    test: TestCase
    count: int = 1
    oracle_status: str = "valid"


@dataclass(frozen=True)
class MistakeUpdate:
    """One problem's contribution to a step: generated tests failed, replayed tests passed, and
    replayed tests that the grid now refuses as not judging behaviour (``rejected``: removed)."""

    problem_id: str
    failed: tuple[MistakeHit, ...] = ()
    passed: tuple[MistakeHit, ...] = ()
    rejected: tuple[TestCase, ...] = ()

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
            **({"rejected": [t.to_dict() for t in self.rejected]} if self.rejected else {}),
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
    rejected: int = 0
    """Stored tests removed because, replayed, the grid refused them as not judging behaviour."""

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
    returns no tests and :meth:`apply_step` records nothing. ``read_only=True`` opens an existing
    book without writing to it (:meth:`apply_step` then raises). A path that exists but is not a
    book raises :class:`BookFileError` and is left untouched (see :func:`recognise_book`); a writing
    open of a path that does not exist creates a new book there. A writing open takes the write lock
    once, so a book that another process is writing or that cannot be written (a read-only file
    system) raises :class:`BookWriteError` at the open, before any work.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        enabled: bool = True,
        top_k: int = 8,
        capacity: int = 64,
        read_only: bool = False,
    ) -> None:
        if top_k < 0 or capacity < 1:
            raise ValueError(f"top_k must be >= 0 and capacity >= 1, got {top_k}, {capacity}")
        self.enabled = enabled
        self.top_k = top_k
        self.capacity = capacity
        self.path = Path(path) if path is not None else None
        self.read_only = read_only
        self._conn: sqlite3.Connection | None = None
        if enabled:
            if self.path is None:
                raise ValueError("an enabled Mistake Book needs a database path")
            self._conn = self._open(self.path, read_only)

    @staticmethod
    def _open(path: Path, read_only: bool) -> sqlite3.Connection:
        """Recognise the file, then connect: read-only, or for writing (creating or marking the book)."""
        kind = recognise_book(path)
        if kind == "missing":
            if read_only:
                raise BookFileError(f"no Mistake Book at {path}")
            _create_book(path)
        if read_only:
            return sqlite3.connect(read_only_uri(path), uri=True, isolation_level=None)
        try:
            conn = sqlite3.connect(str(path), isolation_level=None, timeout=LOCK_WAIT_S)
        except sqlite3.Error as e:
            raise BookWriteError(path, f"cannot open the Mistake Book for writing ({e})") from None
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            # Take the write lock and write once now (undone): a book that another process is
            # writing, or that cannot be written, is refused here, before any work, not when the
            # step is recorded.
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('write_probe', '')")
            conn.execute("DELETE FROM meta WHERE key = 'write_probe'")
            if kind == "unmarked":  # a book from before the mark: stamp it on the first writing open
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            else:
                conn.execute("ROLLBACK")
        except sqlite3.Error as e:
            conn.close()
            raise BookWriteError(path, f"cannot write the Mistake Book ({_write_reason(e)})") from None
        except BaseException:
            conn.close()
            raise
        return conn

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

    def write_jsonl(self, stream: TextIO) -> int:
        """Write every entry to ``stream`` as one JSON line; returns the count."""
        entries = self.entries()
        for e in entries:
            stream.write(json.dumps(e.to_dict(), ensure_ascii=False) + "\n")
        return len(entries)

    def export_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write every entry as one JSON line (atomically: temp file, then rename); returns the count.
        (``codea1 mistakes export`` writes through the CLI's output helper instead.)"""
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                n = self.write_jsonl(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return n

    # ---- writing -----------------------------------------------------------------------------------

    def apply_step(self, step: int, updates: Sequence[MistakeUpdate]) -> StepReport:
        """Apply one training step's updates in a single transaction and record ``step`` as committed.

        Steps must increase: applying a step at or below :attr:`last_step` raises ``ValueError``
        (so a resumed run cannot count the same step twice). A database error (locked by another
        process, a full disk) is a :class:`BookWriteError`, the book left at the previous step.
        """
        if self._conn is None:
            return StepReport(step)
        if self.read_only:
            raise ValueError(f"Mistake Book {self.path} is open read-only")
        last = self.last_step
        if last is not None and step <= last:
            raise ValueError(f"Mistake Book already holds step {last}; cannot apply step {step}")
        totals = dict.fromkeys(
            ("added", "incremented", "decremented", "removed", "evicted", "skipped", "rejected"), 0
        )
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            for update in updates:
                for key, n in self._apply_problem(conn, step, update).items():
                    totals[key] += n
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_step', ?)", (str(step),))
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:  # SQLite has rolled back already after some errors (a full disk)
                conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error):
                raise BookWriteError(
                    self.path or "", f"cannot record step {step} ({_write_reason(e)})"
                ) from None
            raise
        return StepReport(step, **totals)

    def _next_seq(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = 'next_seq'").fetchone()
        seq = int(row[0]) if row else 0
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_seq', ?)", (str(seq + 1),))
        return seq

    def _apply_problem(self, conn: sqlite3.Connection, step: int, update: MistakeUpdate) -> dict[str, int]:
        """Rejections, decrements, then increments, then eviction, for one problem (inside the step's
        transaction)."""
        out = dict.fromkeys(
            ("added", "incremented", "decremented", "removed", "evicted", "skipped", "rejected"), 0
        )
        pid = update.problem_id
        for test in update.rejected:
            call = normalize_expression(test.call)
            if call is not None:
                out["rejected"] += conn.execute(
                    "DELETE FROM entries WHERE problem_id = ? AND call = ?", (pid, call)
                ).rowcount
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
