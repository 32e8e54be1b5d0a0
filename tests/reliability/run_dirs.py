"""Helpers of the run-directory reliability tests: scripted training runs, byte snapshots of a
directory, and the shape of a refused command's output (one line, no traceback)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import yaml

from codea1.cli import main

FAST = [
    "--preset", "tiny-cpu", "--engine", "scripted", "--progress", "plain", "--set", "tracking.tensorboard=false",
    "--set", "train.save_every=2", "--set", "train.keep_last=3",
]  # fmt: skip
"""A seconds-long scripted run with a checkpoint every second step, three kept."""


def private_copy(run_dir: Path, tmp_path: Path, chdir: Callable[[Path], object]) -> Path:
    """A copy of ``run_dir`` under ``tmp_path``, with the working directory (``chdir``, e.g.
    ``monkeypatch.chdir``) moved to an empty folder beside it."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    chdir(cwd)
    return copy


def train(*argv: str) -> tuple[int, str, str]:
    """``codea1 train ARGV`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["train", *argv])
    return code, out.getvalue(), err.getvalue()


def make_run(run_dir: Path, steps: int) -> None:
    """A finished scripted run of ``steps`` steps in ``run_dir``."""
    code, out, err = train(*FAST, "--steps", str(steps), "--run-dir", str(run_dir))
    assert code == 0, out + err


def set_steps(run_dir: Path, steps: int) -> None:
    """Extend (or shorten) a run by editing its saved configuration, as a user would."""
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg["train"]["steps"] = steps
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))


def metrics_steps(run_dir: Path) -> list[int]:
    """The step of every line of ``metrics.jsonl`` (each line must parse)."""
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def snapshot(directory: Path, *, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file under ``directory`` (relative path -> bytes), for byte-identity checks."""
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name not in skip
    }


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    """Exit 2 and exactly one ``codea1: error:`` line on stderr, mentioning every needle."""
    assert code == 2, err
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("codea1: error: "), err
    for needle in needles:
        assert needle in err, (needle, err)
