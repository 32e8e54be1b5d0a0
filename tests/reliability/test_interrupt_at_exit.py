"""Ctrl-C while ``sandbox run`` exits (issue 26, part 4): once the output is written, the process only
exits, and an interrupt then (the interpreter's exit callbacks, torch's finalizers among them, once
printed a ``KeyboardInterrupt`` traceback) changes nothing: exit 0, the finished output, no line on
stderr but the summary, no scratch directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from codea1.cli.interrupts import closed_whole

from .reliability_cli import (
    Place,
    cli_env,
    place_fixture,  # noqa: F401 - the `place` fixture
    sandbox_roots,
    tree,
)

JOB = {"id": "neg", "reference": "def f(x):\n    return -x\n", "entry_point": "f",
       "codes": ["def f(x):\n    return -x\n"], "tests": [{"call": "f(2)", "predicted": "-2"}]}  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("delay_s", [0.0, 0.005, 0.02])
def test_an_interrupt_after_the_output_is_written_changes_nothing(
    place: Place, delay_s: float, sig: signal.Signals
) -> None:
    src = place.data / "jobs.jsonl"
    src.write_text(json.dumps(JOB) + "\n")
    before = tree(place.data)
    out = place.out / "r.jsonl"
    argv = ["sandbox", "run", "--input", src, "--output", out, "--workers", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "codea1", *[str(a) for a in argv]],
        cwd=place.cwd,
        env=cli_env(place.tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even when run in the background
    )
    deadline = time.monotonic() + 120
    while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert out.exists(), proc.communicate()[1].decode()[-2000:]
    time.sleep(delay_s)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text and "Exception ignored" not in text, text[-3000:]
    assert text.splitlines() == ["codea1 sandbox run: ran 1 of 1 line(s)"], text[-3000:]
    assert json.loads(out.read_text())["id"] == "neg"
    assert sandbox_roots(place.tmp) == [] and tree(place.tmp) == {} and tree(place.cwd) == {}
    assert tree(place.data) == before


class _Shutdown:
    """A resource whose shutdown is hit by Ctrl-C halfway (as a sandbox removing its workers)."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def __enter__(self) -> _Shutdown:
        return self

    def __exit__(self, *exc: object) -> None:
        self.steps.append("workers stopped")
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here
        self.steps.append("scratch removed")


@pytest.mark.usefixtures("python_sigint")
def test_an_interrupt_during_a_shutdown_waits_for_its_end() -> None:
    resource = _Shutdown()
    with pytest.raises(KeyboardInterrupt), closed_whole(resource) as entered:
        assert entered is resource
    assert resource.steps == ["workers stopped", "scratch removed"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
