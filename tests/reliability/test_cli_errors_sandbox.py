"""``codea1 sandbox run`` on bad options, bad paths, bad bytes, Ctrl-C and kill -9.

Every refused command: exit 2, one ``codea1: error:`` line, no traceback, nothing created in the
working, temporary or output directory, the input byte-identical. An interrupted or killed run
leaves no output (not even a hidden partial one), and the next start removes a killed run's
scratch directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codea1.limits import max_workers
from codea1.sandbox import scratch

from .reliability_cli import (
    Place,
    assert_one_line_error,
    assert_untouched,
    cli_env,
    place_fixture,  # noqa: F401 - the `place` fixture
    run_cli,
    run_process,
    sandbox_roots,
    tree,
)

GOOD = {
    "id": "neg",
    "reference": "def f(x):\n    return -x\n",
    "entry_point": "f",
    "codes": ["def f(x):\n    return -x\n", "def f(x):\n    return x\n"],
    "tests": [{"call": "f(2)", "predicted": "-2"}, {"call": "f(0)", "predicted": "1"}],
}


def _jobs(place: Place, lines: list[bytes]) -> Path:
    path = place.data / "jobs.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (["--workers", "-1"], f"--workers must be in [0, {max_workers()}]"),
        (["--test-cpu-s", "0"], "--test-cpu-s must be a number of seconds in (0, 3600], got 0"),
        (["--test-cpu-s", "1e9"], "--test-cpu-s must be a number of seconds in (0, 3600], got 1e+09"),
        (["--load-cpu-s", "nan"], "--load-cpu-s must be a number of seconds in (0, 3600], got nan"),
        (["--batch", "0"], "--batch must be a finite number >= 1"),
        (["--rel-tol", "-1"], "--rel-tol must be a finite number >= 0"),
    ],
)
def test_bad_option_is_one_line_and_creates_nothing(
    place: Place, capsys: pytest.CaptureFixture[str], option: list[str], needle: str
) -> None:
    src = _jobs(place, [json.dumps(GOOD).encode()])
    before = tree(place.data)
    out = place.out / "results.jsonl"
    outcome = run_cli(["sandbox", "run", "--input", src, "--output", out, *option], capsys)
    assert_one_line_error(outcome, needle)
    assert_untouched(place, before)


def test_input_directory_is_one_line(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run_cli(["sandbox", "run", "--input", place.data, "--output", place.out / "r.jsonl"], capsys)
    assert_one_line_error(outcome, "is a directory")
    assert_untouched(place, {})


def test_output_directory_is_one_line_and_strands_nothing(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _jobs(place, [json.dumps(GOOD).encode()])
    before = tree(place.data)
    outcome = run_cli(["sandbox", "run", "--input", src, "--output", place.out, "--workers", "1"], capsys)
    assert_one_line_error(outcome, "is a directory")
    assert_untouched(place, before)


def test_output_in_missing_directory_is_one_line(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    src = _jobs(place, [json.dumps(GOOD).encode()])
    before = tree(place.data)
    outcome = run_cli(["sandbox", "run", "--input", src, "--output", place.out / "no" / "r.jsonl"], capsys)
    assert_one_line_error(outcome, "does not exist")
    assert_untouched(place, before)


def test_bad_bytes_cost_only_their_line(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps(GOOD).encode()
    lines = [
        good,
        b'{"id": "x\xff\xfe", "codes": []}',
        b'{"id": "s\\ud800", "reference": "def f(): pass", "entry_point": "f", "codes": [], "tests": []}',
        b"[" * 50_000,
        good,
    ]
    src = _jobs(place, lines)
    before = tree(place.data)
    out = place.out / "r.jsonl"
    outcome = run_cli(["sandbox", "run", "--input", src, "--output", out, "--workers", "2"], capsys)
    assert outcome.code == 0 and "Traceback" not in outcome.err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["neg", "line-2", "s\ud800", "line-4", "neg"]
    assert "not UTF-8 (byte 0xff at column 10)" in rows[1]["error"]
    assert "lone surrogate" in rows[2]["error"] and "nested too deeply" in rows[3]["error"]
    assert rows[0] == rows[4] and "error" not in rows[0]
    assert tree(place.data) == before
    assert list(tree(place.out)) == ["r.jsonl"] and tree(place.cwd) == {} and tree(place.tmp) == {}


def _slow_jobs(place: Place) -> Path:
    """Jobs whose codes loop until their CPU budget runs out: a run that lasts several seconds."""
    jobs = []
    for i in range(6):
        jobs.append(
            {
                "id": f"slow{i}",
                "reference": "def f(x):\n    return x\n",
                "entry_point": "f",
                "codes": [f"def f(x):\n    while True:\n        x += {i}\n"],
                "tests": [{"call": f"f({j})", "predicted": str(j)} for j in range(3)],
            }
        )
    return _jobs(place, [json.dumps(j).encode() for j in jobs])


def _start_run(place: Place, src: Path, out: Path, workers: int = 2) -> subprocess.Popen[bytes]:
    argv = ["sandbox", "run", "--input", src, "--output", out, "--workers", workers, "--test-cpu-s", "1"]
    return subprocess.Popen(
        [sys.executable, "-m", "codea1", *[str(a) for a in argv], "--batch", "2"],
        cwd=place.cwd,
        env=cli_env(place.tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even when run in the background
    )


def _wait_for_sandbox(place: Place, proc: subprocess.Popen[bytes], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not sandbox_roots(place.tmp):
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        assert time.monotonic() < deadline, "the sandbox did not start"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("delay_s", "workers", "sig"),
    [(0.0, 2, signal.SIGINT), (1.5, 2, signal.SIGINT), (1.5, 2, signal.SIGTERM),
     pytest.param(1.5, 1, signal.SIGINT, marks=pytest.mark.slow)],
)  # fmt: skip
def test_ctrl_c_leaves_no_output_no_traceback_no_scratch(
    place: Place, delay_s: float, workers: int, sig: signal.Signals
) -> None:
    """Ctrl-C, or SIGTERM (handled the same way): one line, no output, no scratch, no cgroups."""
    src = _slow_jobs(place)
    before = tree(place.data)
    out = place.out / "r.jsonl"
    proc = _start_run(place, src, out, workers)
    _wait_for_sandbox(place, proc)
    time.sleep(delay_s)  # 0: while the workers start; 1.5 s: while tasks run (in dispatcher threads)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    text = err.decode(errors="replace")
    assert proc.returncode == 130, text[-3000:]
    assert "Traceback" not in text and "Exception in thread" not in text, text[-3000:]
    assert text.strip().splitlines()[-1] == "codea1: interrupted"
    assert_untouched(place, before)


def test_kill_9_leaves_no_output_and_next_start_removes_the_scratch(place: Place) -> None:
    src = _slow_jobs(place)
    before = tree(place.data)
    proc = _start_run(place, src, place.out / "r.jsonl")
    _wait_for_sandbox(place, proc)
    time.sleep(1.0)
    proc.kill()
    proc.communicate(timeout=60)
    assert tree(place.out) == {} and tree(place.cwd) == {}  # not even a hidden partial output
    stale = sandbox_roots(place.tmp)
    assert len(stale) == 1  # kill -9 gives no chance to clean up ...
    one = place.data / "one.jsonl"
    one.write_text(json.dumps(GOOD) + "\n")
    outcome = run_process(
        ["sandbox", "run", "--input", one, "--output", place.out / "one.jsonl", "--workers", "1"],
        place.cwd,
        tmpdir=place.tmp,
    )
    assert outcome.code == 0, outcome.err[-2000:]
    assert sandbox_roots(place.tmp) == []  # ... the next start does
    assert tree(place.data)["jobs.jsonl"] == before["jobs.jsonl"]
    assert list(tree(place.out)) == ["one.jsonl"] and tree(place.cwd) == {}


def test_stale_roots_are_those_of_dead_owners_only(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = os.getpid()
    my_start = scratch._start_ticks(me)
    assert my_start is not None
    names = {
        f"codea1-sandbox-{dead.pid}-12345-aaaa": False,  # owner gone
        f"codea1-sandbox-{me}-{my_start + 1}-bbbb": False,  # pid reused by another process
        f"codea1-sandbox-{me}-{my_start}-cccc": True,  # this process
        f"codea1-sandbox-{me}-0-dddd": True,  # start time unknown: the live pid decides
        "codea1-sandbox-oldstyle": True,  # not ours to judge
    }
    for name in names:
        (tmp_path / name / "w0").mkdir(parents=True)
        (tmp_path / name / "w0" / "f.txt").write_text("x")
    locked = tmp_path / f"codea1-sandbox-{dead.pid}-12345-aaaa" / "w0"
    locked.chmod(0)  # a sandboxed program may leave a directory nobody can enter
    assert scratch.remove_stale_roots(str(tmp_path)) == 2
    assert {p.name for p in tmp_path.iterdir()} == {n for n, keep in names.items() if keep}


def test_a_subprocess_run_of_bad_options_is_one_line(place: Place) -> None:
    src = _jobs(place, [json.dumps(GOOD).encode()])
    before = tree(place.data)
    argv = ["sandbox", "run", "--input", src, "--output", place.out / "r.jsonl", "--workers", "-1"]
    outcome = run_process(argv, place.cwd, tmpdir=place.tmp)
    assert_one_line_error(outcome, "--workers")
    assert_untouched(place, before)


def test_an_endless_input_line_is_one_line_not_an_endless_read(place: Place) -> None:
    """``--input /dev/zero`` has no newline: refused after 64 MiB, no output, no scratch."""
    before = tree(place.data)
    argv = ["sandbox", "run", "--input", "/dev/zero", "--output", place.out / "r.jsonl"]
    outcome = run_process(argv, place.cwd, tmpdir=place.tmp)
    assert outcome.code == 2 and outcome.err.strip() == (
        "codea1: error: --input line 1 is longer than 64 MiB: not a JSONL file of jobs?"
    )
    assert_untouched(place, before)


def test_bounded_reads_each_line_within_its_limit() -> None:
    import io

    from codea1.cli import CliError
    from codea1.cli.sandbox import bounded

    assert list(bounded(io.BytesIO(b"ab\ncd\n"), limit=3)) == [b"ab\n", b"cd\n"]
    with pytest.raises(CliError, match="line 2 is longer than"):
        list(bounded(io.BytesIO(b"ab\n" + b"x" * 10), limit=4))
