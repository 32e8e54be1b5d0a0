"""``codea1.cli.outputs.OutputFile``: the output appears whole on commit, or not at all.

Both ways of holding the output until then are covered: the unnamed file (``O_TMPFILE``) and the
hidden named stand-in used where the file system has no unnamed files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codea1.cli import CliError, outputs
from codea1.cli.outputs import OutputFile, check_output


@pytest.fixture(params=["unnamed", "stand-in"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "stand-in":
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    return str(request.param)


def test_commit_replaces_the_old_file_whole(tmp_path: Path, mode: str) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    with OutputFile(str(target)) as out:
        out.stream.write("new 1\n")
        assert target.read_text() == "old\n"  # nothing visible before the commit
        hidden = [p.name for p in tmp_path.iterdir() if p.name != "out.jsonl"]
        assert len(hidden) == (1 if mode == "stand-in" else 0)  # an unnamed file has no name to see
        out.stream.write("new 2\n")
        out.commit()
    assert target.read_text() == "new 1\nnew 2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_an_error_leaves_the_old_file_and_nothing_else(tmp_path: Path, mode: str) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt), OutputFile(str(target)) as out:
        out.stream.write("partial\n")
        raise KeyboardInterrupt
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_stand_ins_of_dead_owners_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".codea1-out-{dead.pid}-abc"
    mine = tmp_path / f".codea1-out-{os.getpid()}-abc"
    other = tmp_path / ".codea1-out-notapid"
    for p in (stale, mine, other):
        p.write_text("x")
    assert outputs.remove_stale_stand_ins(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name])


def test_a_device_is_written_in_place(mode: str) -> None:
    with OutputFile(os.devnull) as out:
        out.stream.write("discarded\n")
        out.commit()
    assert Path(os.devnull).is_char_device()


def test_check_output(tmp_path: Path) -> None:
    check_output("-")
    check_output(str(tmp_path / "new.jsonl"))
    check_output(str(tmp_path / "a" / "b" / "c.json"), parent_must_exist=False)
    for bad, needle in (
        (tmp_path, "is a directory"),
        (tmp_path / "no" / "x.jsonl", "does not exist"),
    ):
        with pytest.raises(CliError, match=needle):
            check_output(str(bad))
    (tmp_path / "file").write_text("")
    with pytest.raises(CliError, match="is not a directory"):
        check_output(str(tmp_path / "file" / "x.json"), parent_must_exist=False)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
