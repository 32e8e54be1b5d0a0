"""``codea1 train --resume`` on a damaged run directory: metrics lines kept around garbage and torn
tails (with the original file kept), damaged checkpoints passed over for the newest intact one, and
a clear refusal, changing nothing, when no checkpoint is intact; and a disk that fills up while the
run writes: one error line, nothing half-written, the run resumed once there is room."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from codea1.replay.mistake_book import APPLICATION_ID, SCHEMA_VERSION, MistakeBook

from .run_dirs import (
    FAST,
    assert_one_line_error,
    make_run,
    metrics_steps,
    private_copy,
    set_steps,
    snapshot,
    train,
)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 4-step scripted run with checkpoints 2 and 4."""
    run_dir = tmp_path_factory.mktemp("base") / "run"
    make_run(run_dir, 4)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000002", "step_000004"]
    return run_dir


@pytest.fixture
def run(finished_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the finished run; the working directory is an empty folder beside it."""
    copy = private_copy(finished_run, tmp_path, monkeypatch.chdir)
    return copy


def lines_of(run_dir: Path) -> list[bytes]:
    return (run_dir / "metrics.jsonl").read_bytes().splitlines(keepends=True)


def without_times(line: bytes) -> dict:
    return {k: v for k, v in json.loads(line).items() if not k.startswith(("time/", "memory/"))}


def notices(err: str) -> list[str]:
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("codea1: ")]


def test_the_trainers_book_carries_the_mark(run: Path) -> None:
    with sqlite3.connect(run / "mistake_book.sqlite") as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert (run / "checkpoints" / "step_000004" / "manifest.json").is_file()


def test_an_undamaged_resume_keeps_the_file_and_says_nothing(run: Path) -> None:
    before = lines_of(run)
    set_steps(run, 5)
    code, out, err = train("--resume", str(run))
    assert code == 0, out + err
    assert notices(err) == []
    assert lines_of(run)[:4] == before and metrics_steps(run) == [1, 2, 3, 4, 5]
    assert not list(run.glob("metrics.jsonl.*")) and not list(Path.cwd().iterdir())


def test_a_garbage_line_in_the_middle_costs_only_itself(run: Path) -> None:
    original = lines_of(run)
    damaged = b"".join(original[:2]) + b"\x00\xff not json at all\n" + b"".join(original[2:])
    (run / "metrics.jsonl").write_bytes(damaged)
    set_steps(run, 6)
    code, out, err = train("--resume", str(run))
    assert code == 0, out + err
    assert metrics_steps(run) == [1, 2, 3, 4, 5, 6]
    assert lines_of(run)[:4] == original  # every readable line kept byte for byte
    (note,) = notices(err)
    assert "skipped 1 unreadable line(s) (line 3)" in note and "metrics.jsonl.orig" in note
    assert (run / "metrics.jsonl.orig").read_bytes() == damaged  # the original is kept
    assert not list(Path.cwd().iterdir())


def test_a_torn_last_line_of_the_checkpointed_step_is_restored(run: Path) -> None:
    original = lines_of(run)
    torn = b"".join(original[:3]) + original[3][:30]  # the disk lost the tail of step 4's line
    (run / "metrics.jsonl").write_bytes(torn)
    code, out, err = train("--resume", str(run))
    assert code == 0, out + err
    assert lines_of(run) == original  # step 4's row came back from checkpoint 4
    (note,) = notices(err)
    assert "line 4" in note and "restored the line of step 4" in note
    assert (run / "metrics.jsonl.orig").read_bytes() == torn


def test_a_torn_line_after_the_checkpoint_is_run_again_and_said(run: Path) -> None:
    set_steps(run, 5)
    original = lines_of(run)
    (run / "metrics.jsonl").write_bytes(b"".join(original) + b'{"step": 5, "coder/rew')
    code, out, err = train("--resume", str(run))
    assert code == 0, out + err
    assert metrics_steps(run) == [1, 2, 3, 4, 5] and lines_of(run)[:4] == original
    (note,) = notices(err)
    assert "skipped 1 unreadable line(s) (line 5)" in note


def test_a_second_repair_keeps_both_originals(run: Path) -> None:
    for steps in (5, 6):
        original = lines_of(run)
        (run / "metrics.jsonl").write_bytes(b"".join(original) + b"garbage\n")
        set_steps(run, steps)
        code, out, err = train("--resume", str(run))
        assert code == 0, out + err
    assert (run / "metrics.jsonl.orig").exists() and (run / "metrics.jsonl.orig.2").exists()
    assert metrics_steps(run) == [1, 2, 3, 4, 5, 6]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated state.json": lambda ck: _truncate(ck / "state.json"),
    "flipped weights byte": lambda ck: _flip_byte(ck / "coder" / "weights.safetensors"),
    "truncated weights": lambda ck: _truncate(ck / "tester" / "weights.safetensors"),
    "bad book snapshot": lambda ck: (ck / "mistake_book.sqlite").write_bytes(b"garbage"),
    "missing optimizer": lambda ck: (ck / "coder" / "optimizer.pt").unlink(),
    "garbage manifest": lambda ck: (ck / "manifest.json").write_text("{"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_newest_checkpoint_falls_back_to_the_intact_one(run: Path, damage: str) -> None:
    clean = lines_of(run)
    DAMAGE[damage](run / "checkpoints" / "step_000004")
    set_steps(run, 5)
    code, out, err = train("--resume", str(run))
    assert code == 0, out + err
    said = notices(err)
    assert any("checkpoint step_000004 is damaged" in n for n in said), said
    assert any("resuming from step_000002" in n for n in said), said
    assert metrics_steps(run) == [1, 2, 3, 4, 5]
    # steps 3 and 4 ran again from checkpoint 2 and came out as the first time
    assert [without_times(x) for x in lines_of(run)[:4]] == [without_times(x) for x in clean]
    assert (run / "checkpoints" / "step_000004" / "manifest.json").is_file()  # rewritten whole


def test_a_checkpoint_from_before_manifests_is_used_and_said(run: Path) -> None:
    for ck in (run / "checkpoints").iterdir():
        (ck / "manifest.json").unlink()
    set_steps(run, 5)
    code, out, err = train("--resume", str(run))
    assert code == 0, out + err
    said = notices(err)
    assert said == ["codea1: checkpoint step_000004 predates manifests: its weights were not verified"]
    assert metrics_steps(run) == [1, 2, 3, 4, 5]


def test_a_damaged_checkpoint_from_before_manifests_falls_back(run: Path) -> None:
    for ck in (run / "checkpoints").iterdir():
        (ck / "manifest.json").unlink()
    (run / "checkpoints" / "step_000004" / "mistake_book.sqlite").write_bytes(b"")
    code, out, err = train("--resume", str(run))
    assert code == 0, out + err
    said = " | ".join(notices(err))
    assert "step_000004 is damaged" in said and "empty file" in said and "resuming from step_000002" in said


def test_no_intact_checkpoint_is_one_line_and_changes_nothing(run: Path) -> None:
    for ck in (run / "checkpoints").iterdir():
        _truncate(ck / "state.json")
    before = snapshot(run, skip=("train.lock",))
    code, out, err = train("--resume", str(run))
    assert_one_line_error(code, err, "no intact checkpoint", "step_000004", "step_000002")
    assert snapshot(run, skip=("train.lock",)) == before
    assert not list(Path.cwd().iterdir())


# ---- a disk that fills up while the run writes (issue 35, item 6) -----------------------------------

EVERY_STEP = [*FAST, "--set", "train.save_every=1"]


def _full() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _resumes_to_the_end(run_dir: Path, steps: int) -> None:
    code, out, err = train("--resume", str(run_dir))
    assert code == 0, out + err
    assert metrics_steps(run_dir) == list(range(1, steps + 1))
    assert not list(run_dir.rglob("*.tmp")), list(run_dir.rglob("*.tmp"))


def test_a_full_disk_while_the_book_records_a_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite rolls a transaction back itself when the disk is full; the book's own ROLLBACK then
    raised ``cannot rollback - no transaction is active``, a traceback hiding the cause."""
    real = MistakeBook._apply_problem

    def full_at_step_2(self: MistakeBook, conn: sqlite3.Connection, step: int, update: object) -> dict:
        if step == 2:
            conn.execute("ROLLBACK")  # what SQLite does on SQLITE_FULL at the commit
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, conn, step, update)

    monkeypatch.setattr(MistakeBook, "_apply_problem", full_at_step_2)
    run_dir = tmp_path / "run"
    code, _, err = train(*EVERY_STEP, "--steps", "3", "--run-dir", str(run_dir))
    assert_one_line_error(code, err, "mistake_book.sqlite: cannot record step 2 (database or disk is full)",
                          f"codea1 train --resume {run_dir}")  # fmt: skip
    with MistakeBook(run_dir / "mistake_book.sqlite", read_only=True) as book:
        assert book.last_step == 1
    monkeypatch.setattr(MistakeBook, "_apply_problem", real)
    _resumes_to_the_end(run_dir, 3)


def test_a_full_disk_while_saving_a_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint the disk could not hold: one line naming it, its partial copy removed (it was
    left as ``step_N.tmp``, and some writers' errors were tracebacks), the one before it intact."""
    from codea1.engine.scripted import ScriptedLearner

    real = ScriptedLearner.save

    def full_in_step_2(self: ScriptedLearner, path: Path) -> None:
        real(self, path)
        if Path(path).parent.name == "step_000002.tmp":
            raise _full()

    monkeypatch.setattr(ScriptedLearner, "save", full_in_step_2)
    run_dir = tmp_path / "run"
    code, _, err = train(*EVERY_STEP, "--steps", "3", "--run-dir", str(run_dir))
    assert_one_line_error(code, err, "step_000002: cannot save the checkpoint (No space left on device)",
                          "--resume")  # fmt: skip
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000001"]
    monkeypatch.setattr(ScriptedLearner, "save", real)
    _resumes_to_the_end(run_dir, 3)


def test_a_full_disk_while_writing_metrics_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[Errno 28] No space left on device`` said no file; the error names ``metrics.jsonl``."""
    from codea1 import tracking

    real = tracking.os.fsync
    calls = {"n": 0}

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("metrics.jsonl"):
            calls["n"] += 1
            if calls["n"] == 2:
                raise _full()
        real(fd)

    monkeypatch.setattr(tracking.os, "fsync", fsync)
    run_dir = tmp_path / "run"
    code, _, err = train(*EVERY_STEP, "--steps", "3", "--run-dir", str(run_dir))
    monkeypatch.setattr(tracking.os, "fsync", real)
    assert_one_line_error(code, err, "metrics.jsonl: No space left on device", "--resume")
    _resumes_to_the_end(run_dir, 3)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``mount(size)``: a tmpfs of that size (skipped where mounting is not allowed), unmounted after."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk-{len(mounted)}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, check=False)  # fmt: skip
        if done.returncode != 0:
            pytest.skip("cannot mount a small tmpfs here (needs privileges)")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


@pytest.mark.parametrize("size", ["80k", "160k", "240k"])
def test_a_run_directory_on_a_small_disk(small_disk: Callable[[str], Path], size: str) -> None:
    """A real full disk, reached by the book, a checkpoint or the metrics depending on the size."""
    disk = small_disk(size)
    run_dir = disk / "run"
    code, _, err = train(*EVERY_STEP, "--steps", "4", "--run-dir", str(run_dir))
    assert_one_line_error(code, err)
    assert not list(disk.rglob("*.tmp")), list(disk.rglob("*.tmp"))
    subprocess.run(["mount", "-o", "remount,size=16M", str(disk)], check=True)
    _resumes_to_the_end(run_dir, 4)
