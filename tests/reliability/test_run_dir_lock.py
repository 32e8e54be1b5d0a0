"""One training process per run directory, and ``codea1 train`` refusing ordinary mistakes in one
line (exit 2) before it creates anything."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codea1.run_lock import LOCK_FILE, RunDirBusy, RunDirLock

from .run_dirs import FAST, assert_one_line_error, make_run, metrics_steps, set_steps, snapshot, train

HOLDER = textwrap.dedent(
    """
    import sys, time
    from codea1.run_lock import RunDirLock
    RunDirLock(sys.argv[1]).acquire()
    print("HELD", flush=True)
    time.sleep(300)
    """
)


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, to check that nothing is left in it."""
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    return here


def hold(run_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "HELD"
    return proc


def test_a_second_resume_is_refused_naming_the_holder(tmp_path: Path, cwd: Path) -> None:
    run = tmp_path / "run"
    make_run(run, 2)
    set_steps(run, 3)
    holder = hold(run)
    try:
        before = snapshot(run)
        code, _, err = train("--resume", str(run))
        assert_one_line_error(code, err, f"pid {holder.pid}", socket.gethostname(), "started 20")
        assert snapshot(run) == before  # not even the lock file changed
    finally:
        holder.send_signal(signal.SIGKILL)  # a holder killed outright releases the lock
        holder.wait(timeout=30)
    code, out, err = train("--resume", str(run))
    assert code == 0, out + err
    assert metrics_steps(run) == [1, 2, 3]
    assert not list(cwd.iterdir())


def test_the_lock_is_reentrant_in_one_process_and_exclusive_across_processes(tmp_path: Path) -> None:
    with RunDirLock(tmp_path), RunDirLock(tmp_path):
        assert f'"pid": {os.getpid()}' in (tmp_path / LOCK_FILE).read_text()
        probe = "from codea1.run_lock import RunDirLock; import sys; RunDirLock(sys.argv[1]).acquire()"
        other = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True)
        assert other.returncode != 0 and "RunDirBusy" in other.stderr and f"pid {os.getpid()}" in other.stderr
    free = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True)
    assert free.returncode == 0, free.stderr
    assert issubclass(RunDirBusy, RuntimeError)


def test_run_dir_that_is_a_file(tmp_path: Path, cwd: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    code, _, err = train(*FAST, "--steps", "1", "--run-dir", str(target))
    assert_one_line_error(code, err, "is a file, not a directory")
    assert target.read_text() == "mine\n"
    code, _, err = train(*FAST, "--steps", "1", "--run-dir", str(target / "run"))
    assert_one_line_error(code, err, "is a file, not a directory")
    code, _, err = train("--resume", str(target))
    assert_one_line_error(code, err, "not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "notes.txt"] and not list(cwd.iterdir())


@pytest.mark.parametrize(
    "override, needle",
    [
        ("sandbox.workers=-1", "sandbox.workers must be >= 0"),
        ("data.problems_per_step=100000", "exceeds the"),
        ("train.method=bogus", "train.method"),
    ],
)
def test_a_refused_config_creates_no_run_dir(tmp_path: Path, cwd: Path, override: str, needle: str) -> None:
    run = tmp_path / "run"
    code, _, err = train(*FAST, "--steps", "1", "--run-dir", str(run), "--set", override)
    assert_one_line_error(code, err, needle)
    assert not run.exists() and not list(cwd.iterdir())


def test_resume_of_a_directory_that_is_not_a_run(tmp_path: Path, cwd: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = train("--resume", str(empty))
    assert_one_line_error(code, err, "not a codea1 run directory")
    assert not list(empty.iterdir())


@pytest.mark.parametrize(
    "text, needle",
    [
        (b"train: [\n  x: 1\n", "not valid YAML: expected ',' or ']'"),
        (b"train:\n  steps: \xff\n", "not UTF-8"),
    ],
)
def test_resume_with_a_damaged_config_is_one_line_and_changes_nothing(
    tmp_path: Path, cwd: Path, text: bytes, needle: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_bytes(text)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    before = snapshot(run)
    code, _, err = train("--resume", str(run))
    assert_one_line_error(code, err, needle)
    assert snapshot(run) == before and not list(cwd.iterdir())
