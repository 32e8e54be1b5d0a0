"""Helpers of the CLI reliability tests: run ``codea1`` in-process or as a process, and check that a
refused command printed one error line, left no traceback and changed no file."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from codea1.cli import main

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


@dataclass(frozen=True)
class Place:
    """Where a test runs: ``cwd`` (the working directory), ``tmp`` (``TMPDIR``), ``data`` (inputs),
    ``out`` (outputs); all empty at the start."""

    cwd: Path
    tmp: Path
    data: Path
    out: Path


@pytest.fixture(name="place")
def place_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    """Fresh directories; the working directory and ``tempfile``'s directory point into them."""
    dirs = Place(*(tmp_path / name for name in ("cwd", "tmp", "data", "out")))
    for d in (dirs.cwd, dirs.tmp, dirs.data, dirs.out):
        d.mkdir()
    monkeypatch.chdir(dirs.cwd)
    monkeypatch.setenv("TMPDIR", str(dirs.tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(dirs.tmp))
    return dirs


def assert_untouched(place: Place, data_before: dict[str, str]) -> None:
    """Nothing new in the working, temporary or output directory; the inputs byte-identical."""
    assert tree(place.cwd) == {}, tree(place.cwd)
    assert tree(place.tmp) == {}, tree(place.tmp)
    assert tree(place.out) == {}, tree(place.out)
    assert tree(place.data) == data_before


@dataclass(frozen=True)
class Outcome:
    """Exit code and captured output of one ``codea1`` command."""

    code: int
    out: str
    err: str


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    """``codea1 argv`` in this process (``main``), with stdout and stderr captured."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def cli_env(tmpdir: Path | None = None) -> dict[str, str]:
    """The environment of a ``codea1`` process: this checkout first on the path, ``TMPDIR`` if given."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return env


def run_process(
    argv: list[str],
    cwd: Path,
    *,
    tmpdir: Path | None = None,
    stdin: bytes | None = None,
    timeout: float = 300,
) -> Outcome:
    """``python -m codea1 argv`` as a separate process in ``cwd``."""
    proc = subprocess.run(
        [sys.executable, "-m", "codea1", *[str(a) for a in argv]],
        cwd=cwd,
        env=cli_env(tmpdir),
        input=stdin,
        capture_output=True,
        timeout=timeout,
    )
    return Outcome(
        proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    )


def assert_one_line_error(outcome: Outcome, *needles: str, alone: bool = True) -> str:
    """Exit 2, no traceback, exactly one ``codea1: error:`` line (the last one; the only line of stderr
    when ``alone``) containing every needle. Returns that line."""
    assert outcome.code == 2, (outcome.code, outcome.err[-2000:])
    assert "Traceback" not in outcome.err, outcome.err[-3000:]
    lines = [line for line in outcome.err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("codea1: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    if alone:
        assert lines == errors, lines
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def tree(root: Path) -> dict[str, str]:
    """Relative path → sha256 of every file under ``root`` (directories as ``"dir"``)."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def sandbox_roots(tmpdir: Path) -> list[str]:
    """Sandbox scratch roots (``codea1-sandbox-*``) in a temporary directory."""
    return sorted(p.name for p in tmpdir.glob("codea1-sandbox-*"))
