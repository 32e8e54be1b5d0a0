"""Durable training state: checkpoints written atomically, the latest complete one found on resume.

A checkpoint is the directory ``RUN_DIR/checkpoints/step_NNNNNN`` holding

- ``coder/`` and ``tester/``: what each role's ``Learner.save`` writes (weights, optimizer and
  scheduler state); a shared model (self-play) is saved once, under ``coder/``;
- ``state.json``: step, problem-sampler position, RNG states (python, numpy, torch), the step's
  metrics row;
- ``config.yaml``: the resolved configuration;
- ``mistake_book.sqlite``: a consistent snapshot of the Mistake Book (SQLite online backup);
- ``manifest.json``, written last: the size and SHA-256 of every other file.

It is written under ``step_NNNNNN.tmp`` (every file fsynced while it is hashed for the manifest)
and renamed when complete, so a directory without the suffix was whole when written. Damage after
that (a truncated or edited file, a disk error) is caught by :func:`verify_checkpoint` against the
manifest; resume takes the newest checkpoint that verifies and loads (:func:`resume_candidates`).
A checkpoint written before manifests existed is accepted when its ``state.json`` parses, its role
directories exist and its book snapshot is a sound book (its weights cannot be checked then).

The book snapshot resolves the one ordering hazard: the live book commits step *s* before
checkpoint *s* exists, so after a crash between the two the book is ahead of the latest
checkpoint; resume restores the snapshot, which is the book exactly as of that checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from codea1.config import RunConfig, dump_config
from codea1.engine.base import Learner
from codea1.replay.mistake_book import BookFileError, MistakeBook, recognise_book
from codea1.tracking import fsync_dir

CHECKPOINT_DIR = "checkpoints"
BOOK_FILE = "mistake_book.sqlite"
STATE_FILE = "state.json"
MANIFEST_FILE = "manifest.json"
_HASH_CHUNK = 1 << 20


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and what is wrong with it."""


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written (a full disk, a failing device): its partial copy was
    removed and the checkpoints before it are intact. ``filename`` is the checkpoint, ``strerror``
    the reason."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(None, reason, str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


@dataclass
class TrainerState:
    """What besides the weights a run needs to continue exactly: step, sampler position, RNG."""

    step: int
    sampler: dict[str, Any]
    rng: dict[str, Any]
    metrics: dict[str, Any] | None = None
    """The ``metrics.jsonl`` row of ``step`` (kept so that resume can restore a lost last line)."""


def capture_rng() -> dict[str, Any]:
    """The python, numpy and torch (CPU and CUDA) RNG states as JSON-serialisable data."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "torch": torch.get_rng_state().tolist(),
        "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
    }


def restore_rng(rng: Mapping[str, Any]) -> None:
    """Inverse of :func:`capture_rng`."""
    version, internal, gauss = rng["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, *rest = rng["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(torch.tensor(rng["torch"], dtype=torch.uint8))
    if rng.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in rng["cuda"]])


def checkpoint_name(step: int) -> str:
    """``step_000004``."""
    return f"step_{step:06d}"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Checkpoint directories of a run, oldest first (``.tmp`` leftovers are ignored; whether each
    is intact is :func:`verify_checkpoint`'s question)."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        if p.name.startswith("step_") and p.name[5:].isdigit() and p.is_dir():
            found.append((int(p.name[5:]), p))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    """The most recent checkpoint directory (not verified), or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def _file_digest(path: Path, sync: bool = False) -> str:
    """SHA-256 of a file, read in chunks; ``sync`` also fsyncs it (one pass over the data)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
        if sync:
            os.fsync(f.fileno())
    return digest.hexdigest()


def _files_under(directory: Path) -> Iterator[Path]:
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MANIFEST_FILE:
            yield p


def write_manifest(directory: Path) -> Path:
    """Fsync every file under ``directory`` and record its size and SHA-256 in ``manifest.json``."""
    directory = Path(directory)
    files = {
        p.relative_to(directory).as_posix(): {"size": p.stat().st_size, "sha256": _file_digest(p, sync=True)}
        for p in _files_under(directory)
    }
    path = directory / MANIFEST_FILE
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "files": files}, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    return path


def _read_state(path: Path) -> dict[str, Any]:
    try:
        payload = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{STATE_FILE} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{STATE_FILE} is unreadable ({e})") from None
    if not isinstance(payload, dict) or not {"step", "sampler", "rng"} <= payload.keys():
        raise CheckpointError(f"{STATE_FILE} lacks step/sampler/rng")
    return payload


def verify_checkpoint(path: Path) -> bool:
    """Check checkpoint ``path``; returns True when a manifest vouched for every file, False for a
    checkpoint from before manifests that passed the weaker checks. Raises :class:`CheckpointError`
    saying what is damaged."""
    path = Path(path)
    manifest = path / MANIFEST_FILE
    if manifest.exists():
        try:
            files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
            entries = [(str(name), int(v["size"]), str(v["sha256"])) for name, v in files.items()]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{MANIFEST_FILE} is unreadable ({e})") from None
        for name, size, sha in entries:
            f = path / name
            if not f.is_file():
                raise CheckpointError(f"{name} is missing")
            if f.stat().st_size != size:
                raise CheckpointError(f"{name} has {f.stat().st_size} bytes, the manifest says {size}")
            if _file_digest(f) != sha:
                raise CheckpointError(f"{name} does not match its SHA-256 in the manifest")
        payload = _read_state(path)
        verified = True
    else:  # written before manifests existed: the checks that need no record of the bytes
        payload = _read_state(path)
        for role in payload.get("roles", ["coder"]):
            if not (path / str(role)).is_dir():
                raise CheckpointError(f"role directory {role}/ is missing")
        if (path / BOOK_FILE).exists():
            try:
                recognise_book(path / BOOK_FILE)
            except BookFileError as e:
                raise CheckpointError(str(e).replace(str(path / BOOK_FILE), BOOK_FILE)) from None
        verified = False
    if payload["step"] != int(path.name[5:]):
        raise CheckpointError(f"{STATE_FILE} says step {payload['step']}, the directory {path.name}")
    return verified


def snapshot_book(book_path: Path, dest: Path) -> None:
    """Copy a (possibly open) SQLite book consistently with the online-backup API."""
    src = sqlite3.connect(str(book_path))
    dst = sqlite3.connect(str(dest))
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def save_checkpoint(
    run_dir: Path,
    state: TrainerState,
    cfg: RunConfig,
    learners: Mapping[str, Learner],
    book_path: Path | None,
    keep_last: int,
) -> Path:
    """Write checkpoint ``state.step`` atomically (files, then the manifest, then the rename) and
    prune to the ``keep_last`` most recent ones.

    ``learners`` maps a role name (``coder``, ``tester``) to its learner; pass one entry when the
    roles share a model.
    """
    root = Path(run_dir) / CHECKPOINT_DIR
    final = root / checkpoint_name(state.step)
    tmp = root / (final.name + ".tmp")
    try:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        _write_checkpoint(tmp, state, cfg, learners, book_path)
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)  # what the full disk let through: freed again
        if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
            raise
        first = (str(e).splitlines() or [""])[0]
        reason = getattr(e, "strerror", None) or f"{type(e).__name__}: {first}"
        raise CheckpointWriteError(final, f"cannot save the checkpoint ({reason})") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():  # re-saving the same step (e.g. after resume): replace it whole
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(root)
    for _, old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _write_checkpoint(
    tmp: Path, state: TrainerState, cfg: RunConfig, learners: Mapping[str, Learner], book_path: Path | None
) -> None:
    """Every file of a checkpoint into the directory ``tmp``, the manifest last, all fsynced."""
    for role, learner in learners.items():
        learner.save(tmp / role)
    dump_config(cfg, tmp / "config.yaml")
    if book_path is not None and Path(book_path).exists():
        snapshot_book(Path(book_path), tmp / BOOK_FILE)
    payload = {
        "step": state.step, "sampler": state.sampler, "rng": state.rng, "roles": sorted(learners),
        "metrics": state.metrics,
    }  # fmt: skip
    with open(tmp / STATE_FILE, "w", encoding="utf-8") as f:
        json.dump(payload, f)
    write_manifest(tmp)  # last: fsyncs and hashes everything above
    for sub in sorted({p.parent for p in tmp.rglob("*")}, reverse=True):
        fsync_dir(sub)


def load_checkpoint(path: Path, learners: Mapping[str, Learner]) -> TrainerState:
    """Load the learners' weights/optimizer state and return the trainer state of checkpoint ``path``."""
    path = Path(path)
    payload = _read_state(path)
    for role, learner in learners.items():
        learner.load(path / role)
    row = payload.get("metrics")
    return TrainerState(
        step=int(payload["step"]), sampler=payload["sampler"], rng=payload["rng"],
        metrics=row if isinstance(row, dict) and row.get("step") == payload["step"] else None,
    )  # fmt: skip


def restore_book(checkpoint: Path, book_path: Path) -> bool:
    """Replace the live Mistake Book by the checkpoint's snapshot; returns False if it has none.

    Called before the book is opened, so no connection holds the file; the newer book is removed
    with its SQLite side files (:meth:`MistakeBook.remove_files`).
    """
    snap = Path(checkpoint) / BOOK_FILE
    if not snap.exists():
        return False
    book_path = Path(book_path)
    tmp = book_path.with_name(book_path.name + ".restore.tmp")
    shutil.copyfile(snap, tmp)
    MistakeBook.remove_files(book_path)
    os.replace(tmp, book_path)
    return True


@dataclass
class Resumed:
    """The checkpoint a run resumes from, and what was said about the ones passed over."""

    step: int
    path: Path
    state: TrainerState
    notes: list[str]


def load_latest_intact(run_dir: Path, learners: Mapping[str, Learner]) -> Resumed | None:
    """Load the newest checkpoint that verifies and loads, falling back past damaged ones.

    Returns None when the run has no checkpoint at all. Each checkpoint passed over, and a
    checkpoint from before manifests, adds one line to ``notes``. Raises :class:`CheckpointError`
    when checkpoints exist but none is intact (starting over would discard the run's Mistake Book
    and metrics, so that is left to the user).
    """
    found = list_checkpoints(run_dir)
    notes: list[str] = []
    damaged: list[str] = []
    for step, path in reversed(found):
        try:
            verified = verify_checkpoint(path)
            state = load_checkpoint(path, learners)
        except CheckpointError as e:
            reason = str(e)
        except MemoryError:
            raise
        except Exception as e:  # a file the learner cannot load: damaged in a way the manifest missed
            if type(e).__name__ == "OutOfMemoryError":
                raise
            first = (str(e).splitlines() or [""])[0]
            reason = f"cannot be loaded ({type(e).__name__}: {first})"
        else:
            if not verified:
                notes.append(f"checkpoint {path.name} predates manifests: its weights were not verified")
            if damaged:
                notes.append(f"resuming from {path.name}, the newest intact checkpoint")
            return Resumed(step, path, state, notes)
        damaged.append(f"{path.name}: {reason}")
        notes.append(f"checkpoint {path.name} is damaged ({reason}); skipped")
    if damaged:
        raise CheckpointError(
            f"no intact checkpoint in {Path(run_dir) / CHECKPOINT_DIR} ({'; '.join(damaged)}); "
            "restore one from a backup, or start a new run"
        )
    return None
