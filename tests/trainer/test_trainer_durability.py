"""A training process killed (SIGKILL) or interrupted (SIGINT) mid-step loses nothing committed:
checkpoint of step 1 intact, Mistake Book consistent with it after resume, no torn metrics line."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "trainer_fakes.py"


def start(run_dir: Path, steps: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(run_dir), str(steps), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=HERE,
    )  # fmt: skip


def wait_for(proc: subprocess.Popen, line: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        out = proc.stdout.readline()
        seen.append(out)
        if line in out:
            return
        if not out and proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"never saw {line!r}; output:\n{''.join(seen)}")


def metrics_lines(run_dir: Path) -> list[dict]:
    text = (run_dir / "metrics.jsonl").read_text()
    assert text.endswith("\n"), "torn last line"
    return [json.loads(line) for line in text.splitlines()]


def book_step(run_dir: Path) -> int:
    with sqlite3.connect(run_dir / "mistake_book.sqlite") as conn:
        return int(conn.execute("SELECT value FROM meta WHERE key='last_step'").fetchone()[0])


def test_sigkill_mid_step_then_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = start(run_dir, 3, "--delay", "1.0")
    wait_for(proc, "tester rollout 2")  # step 2 is generating tests
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert (run_dir / "checkpoints" / "step_000001" / "state.json").exists()
    assert not (run_dir / "checkpoints" / "step_000002").exists()
    assert [r["step"] for r in metrics_lines(run_dir)] == [1]
    assert book_step(run_dir) == 1
    resumed = start(run_dir, 3, "--resume")
    out, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out
    assert [r["step"] for r in metrics_lines(run_dir)] == [1, 2, 3]
    assert book_step(run_dir) == 3


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_saves_checkpoint_and_exits_130(tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C, and SIGTERM (what timeout, Slurm and Kubernetes send), stop with a checkpoint."""
    run_dir = tmp_path / "run"
    proc = start(run_dir, 5, "--delay", "1.0")
    wait_for(proc, "tester rollout 2")
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "done step 1" in out
    assert (run_dir / "checkpoints" / "step_000001" / "state.json").exists()
    assert [r["step"] for r in metrics_lines(run_dir)] == [1]
    assert book_step(run_dir) == 1
