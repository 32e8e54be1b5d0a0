"""Input and output files of the batch verbs: checked before any work starts, outputs written whole or not at all.

:func:`check_input` and :func:`check_output` turn a bad path into one :class:`CliError` line before
anything is created. :class:`OutputFile` (and :func:`write_output`, for an output made at once) is
the one way every verb writes an output file. A regular file is collected in an unnamed file
(``O_TMPFILE``) in the target's directory and given its name only when the command finishes, so
Ctrl-C, an error or even ``kill -9`` leaves either the finished file or nothing. Where the file
system has no unnamed files, a hidden ``.codea1-out-<pid>-…`` file stands in, is removed on any
error, and a later start removes the ones whose owner process is dead. A symlink is written
through: its target is the file replaced, and the link stays. A character device or a FIFO
(``/dev/null``, ``/dev/full``, a pipe) is written in place, never replaced by a regular file; a
block device, a socket or a symlink loop is refused.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from codea1.cli import CliError

_STAND_IN_PREFIX = ".codea1-out-"


def check_input(path: str, option: str = "--input") -> None:
    """Raise :class:`CliError` unless ``path`` (or ``-`` for stdin) can be read as an input file."""
    if path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise CliError(f"{option} {path}: is a directory, not a file")
    if not p.exists():
        raise CliError(f"{option} {path}: no such file")
    if not os.access(p, os.R_OK):
        raise CliError(f"{option} {path}: not readable (permission denied)")


def output_target(path: str | os.PathLike[str]) -> Path:
    """The file that writing ``path`` writes: ``path`` itself, or the final target of a symlink (a
    dangling one's target is created). :class:`CliError` for a symlink loop."""
    p = Path(path)
    if not p.is_symlink():
        return p
    try:
        return Path(os.path.realpath(p, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(p))
    except OSError as e:
        raise CliError(f"{path}: a symlink that leads nowhere ({e.strerror or e})") from None


def streamed(target: Path) -> bool:
    """Whether an existing ``target`` is written in place (a character device or a FIFO) rather than
    replaced; :class:`CliError` for what is neither that nor a regular file (a block device, a socket)."""
    try:
        mode = target.stat().st_mode
    except OSError:  # absent, or under a file or an unreadable directory: check_output says which
        return False
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
    raise CliError(f"{target}: {kind}; refusing to write it (give a file name)")


def check_output(path: str, option: str = "--output", *, parent_must_exist: bool = True) -> None:
    """Raise :class:`CliError` unless ``path`` (or ``-`` for stdout) can be written as an output file.

    A symlink is checked as its target (that is the file written). ``parent_must_exist=False``: for
    writers that create the missing directories themselves.
    """
    if path == "-":
        return
    try:
        p = output_target(path)
        if p.is_dir():
            raise CliError(f"{path}: is a directory; give a file name")
        if streamed(p):
            return
    except CliError as e:
        raise CliError(f"{option} {e}") from None
    parent = p.absolute().parent
    if not parent_must_exist:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise CliError(f"{option} {path}: {parent} is not a directory")
    elif not parent.is_dir():
        raise CliError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"{option} {path}: directory {parent} is not writable")


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: the same resolved path, or (both existing) the same device
    and inode, so a symlink or a hard link to an input is caught too. ``-`` is never a file."""
    if str(a) == "-" or str(b) == "-":
        return False
    pa, pb = Path(a), Path(b)
    if pa.resolve() == pb.resolve():
        return True
    try:
        sa, sb = pa.stat(), pb.stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _regular_file(path: str | os.PathLike[str], fd: int) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the regular file ``path`` names (``-``: the file open as ``fd``, standard
    input or output), None for anything else (absent, a terminal, ``/dev/null``, a pipe)."""
    try:
        st = os.fstat(fd) if str(path) == "-" else os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def same_stream(output: str | os.PathLike[str], source: str | os.PathLike[str]) -> bool:
    """Whether writing ``output`` writes the file ``source`` is read from, where either is ``-``: a
    standard input redirected from a file that the output names (``--output /proc/self/fd/0``, or the
    file's own path), or a standard output redirected to (appending to) the input file."""
    if str(output) != "-" and str(source) != "-":
        return False
    a, b = _regular_file(output, 1), _regular_file(source, 0)
    return a is not None and a == b


def check_distinct(output: str | os.PathLike[str] | None, option: str, inputs: dict[str, Any]) -> None:
    """Raise :class:`CliError` when ``output`` is the same file as one of ``inputs`` (option name →
    path, None for an option not given): writing it would destroy that input. ``-`` is standard
    input or output, compared by the file it is redirected from or to (:func:`same_stream`). Call
    it before anything is opened for writing."""
    if output is None:
        return
    for name, path in inputs.items():
        if path is not None and (same_file(output, path) or same_stream(output, path)):
            shown = {"-": "- (standard input)"}.get(str(path), path)
            where = " (standard output)" if str(output) == "-" else ""
            raise CliError(f"{option} {output}{where} is the same file as {name} {shown}; writing it would "
                           "destroy the input: give another output path")  # fmt: skip


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def remove_stale_stand_ins(directory: Path) -> int:
    """Remove ``.codea1-out-<pid>-*`` files in ``directory`` whose owner process is dead; returns the count."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(_STAND_IN_PREFIX):
            continue
        owner = name[len(_STAND_IN_PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and int(owner) != os.getpid() and not _pid_alive(int(owner)):
            with contextlib.suppress(OSError):
                os.unlink(directory / name)
                removed += 1
    return removed


class OutputFile:
    """A text output that appears at ``path`` only on :meth:`commit` (``-`` writes to stdout directly).

    Use as a context manager: leaving the block without :meth:`commit` (an error, Ctrl-C) discards
    what was written. A symlink is written through (its target is replaced, the link stays). An
    existing character device or FIFO (``/dev/null``, a pipe) is written in place, since a rename
    would replace it by a regular file; a block device or a socket is a :class:`CliError`.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._stand_in: str | None = None
        self._unnamed_fd: int | None = None
        if path == "-":
            self.stream: TextIO = sys.stdout
            return
        target = output_target(path)
        self._target = str(target.absolute())
        if streamed(target):
            self.stream = open(target, "w", encoding="utf-8")  # noqa: SIM115 - closed in commit/discard
            return
        directory = target.absolute().parent
        remove_stale_stand_ins(directory)
        try:
            fd = os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o666)
            self._unnamed_fd = fd
        except (AttributeError, OSError):
            fd, self._stand_in = tempfile.mkstemp(prefix=f"{_STAND_IN_PREFIX}{os.getpid()}-", dir=directory)
            os.fchmod(fd, 0o666 & ~_umask())
        self.stream = os.fdopen(fd, "w", encoding="utf-8", closefd=self._unnamed_fd is None)

    def commit(self) -> None:
        """Flush and give the output its name (atomically replacing an older file). A failed write
        (a full disk, ``/dev/full``) is an ``OSError`` naming the output."""
        try:
            self._commit()
        except OSError as e:
            if e.filename is not None or not e.strerror:
                raise
            raise OSError(e.errno, e.strerror, self.path) from None

    def _commit(self) -> None:
        self.stream.flush()
        if self.stream is sys.stdout:
            return
        if self._unnamed_fd is None and self._stand_in is None:
            self.stream.close()
            return
        target = self._target
        if self._unnamed_fd is not None:
            os.fsync(self._unnamed_fd)
            self._link_unnamed(target)
        else:
            assert self._stand_in is not None
            os.fsync(self.stream.fileno())
            self.stream.close()
            os.replace(self._stand_in, target)
            self._stand_in = None

    def _link_unnamed(self, target: str) -> None:
        assert self._unnamed_fd is not None
        fd, self._unnamed_fd = self._unnamed_fd, None
        name = os.path.join(os.path.dirname(target), f"{_STAND_IN_PREFIX}{os.getpid()}-{os.urandom(4).hex()}")
        try:
            os.link(f"/proc/self/fd/{fd}", name, follow_symlinks=True)
        except OSError:  # no /proc: copy into a named stand-in instead
            os.lseek(fd, 0, os.SEEK_SET)
            with open(name, "xb") as f:
                while chunk := os.read(fd, 1 << 20):
                    f.write(chunk)
        finally:
            self.stream.close()
            os.close(fd)
        try:
            os.replace(name, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(name)
            raise

    def discard(self) -> None:
        """Drop what was written (nothing appears at ``path``); safe to call more than once."""
        if self.stream is sys.stdout:
            return
        with contextlib.suppress(OSError, ValueError):
            self.stream.close()
        if self._unnamed_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._unnamed_fd)
            self._unnamed_fd = None
        if self._stand_in is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._stand_in)
            self._stand_in = None

    def __enter__(self) -> OutputFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is not None or not self.stream.closed and self.stream is not sys.stdout:
            self.discard()


def write_output(path: str | os.PathLike[str], text: str, *, make_parents: bool = False) -> None:
    """Write ``text`` as the output ``path`` through :class:`OutputFile` (whole or not at all).

    ``make_parents``: create the missing directories first (removed again if the write fails).
    """
    created: list[Path] = []
    if make_parents and str(path) != "-":
        parent = output_target(path).absolute().parent
        while not parent.exists():
            created.append(parent)
            parent = parent.parent
        for d in reversed(created):
            d.mkdir()
    try:
        with OutputFile(str(path)) as out:
            out.stream.write(text)
            out.commit()
    except BaseException:
        for d in created:
            with contextlib.suppress(OSError):
                d.rmdir()
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
