"""SIGKILL in the middle of a Mistake-Book step leaves the previous step's state intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from codea1.replay.mistake_book import MistakeBook

CHILD = textwrap.dedent(
    """
    import sys, time
    from codea1.replay.mistake_book import MistakeBook, MistakeHit, MistakeUpdate
    from codea1.types import TestCase

    def upd(pid, calls, count=1):
        return MistakeUpdate(pid, failed=tuple(MistakeHit(TestCase(c, "0"), count) for c in calls))

    book = MistakeBook(sys.argv[1])
    book.apply_step(1, [upd("p", ["f(1)", "f(2)"]), upd("q", ["g(1)"])])
    real = MistakeBook._apply_problem
    calls = []

    def slow(self, conn, step, update):
        out = real(self, conn, step, update)
        calls.append(update.problem_id)
        if len(calls) == 2:  # two problems written inside the open transaction
            print("MID", flush=True)
            time.sleep(120)
        return out

    MistakeBook._apply_problem = slow
    many = [upd("p", [f"f({i})" for i in range(3, 400)], 5), upd("q", ["g(1)"], 9), upd("r", ["h(1)"])]
    book.apply_step(2, many)
    print("UNREACHED", flush=True)
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_sigkill_mid_step_keeps_previous_step(tmp_path):
    db = tmp_path / "mistake_book.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line == "MID", f"child did not reach the middle of step 2 (got {line!r})"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with MistakeBook(db, capacity=1000) as book:
        assert book.last_step == 1
        state = {(e.problem_id, e.call): e.frequency for e in book.entries()}
        assert state == {("p", "f(1)"): 1, ("p", "f(2)"): 1, ("q", "g(1)"): 1}
        book.apply_step(2, [])  # the interrupted step can be applied again
        assert book.last_step == 2
