"""Durable training state: checkpoints written atomically, the latest complete one found on resume.

A checkpoint is the directory ``RUN_DIR/checkpoints/step_NNNNNN`` holding

- ``coder/`` and ``tester/``: what each role's ``Learner.save`` writes (weights, optimizer and
  scheduler state); a shared model (self-play) is saved once, under ``coder/``;
- ``state.json``: step, problem-sampler position, RNG states (python, numpy, torch);
- ``config.yaml``: the resolved configuration;
- ``mistake_book.sqlite``: a consistent snapshot of the Mistake Book (SQLite online backup).

It is written under ``step_NNNNNN.tmp`` and renamed when complete, so a directory without the
suffix is always whole. The book snapshot resolves the one ordering hazard: the live book commits
step *s* before checkpoint *s* exists, so after a crash between the two the book is ahead of the
latest checkpoint; resume restores the snapshot, which is the book exactly as of that checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from codea1.config import RunConfig, dump_config
from codea1.engine.base import Learner
from codea1.replay.mistake_book import MistakeBook

CHECKPOINT_DIR = "checkpoints"
BOOK_FILE = "mistake_book.sqlite"
STATE_FILE = "state.json"


@dataclass
class TrainerState:
    """What besides the weights a run needs to continue exactly: step, sampler position, RNG."""

    step: int
    sampler: dict[str, Any]
    rng: dict[str, Any]


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
    """Complete checkpoints of a run, oldest first (``.tmp`` leftovers are ignored)."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        if p.is_dir() and p.name.startswith("step_") and p.name[5:].isdigit() and (p / STATE_FILE).exists():
            found.append((int(p.name[5:]), p))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    """The most recent complete checkpoint, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    """Write checkpoint ``state.step`` atomically and prune to the ``keep_last`` most recent ones.

    ``learners`` maps a role name (``coder``, ``tester``) to its learner; pass one entry when the
    roles share a model.
    """
    root = Path(run_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(state.step)
    tmp = root / (final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for role, learner in learners.items():
        learner.save(tmp / role)
    dump_config(cfg, tmp / "config.yaml")
    if book_path is not None and Path(book_path).exists():
        snapshot_book(Path(book_path), tmp / BOOK_FILE)
    payload = {"step": state.step, "sampler": state.sampler, "rng": state.rng, "roles": sorted(learners)}
    with open(tmp / STATE_FILE, "w", encoding="utf-8") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if final.exists():  # re-saving the same step (e.g. after resume): replace it whole
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    for _, old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, learners: Mapping[str, Learner]) -> TrainerState:
    """Load the learners' weights/optimizer state and return the trainer state of checkpoint ``path``."""
    path = Path(path)
    payload = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    for role, learner in learners.items():
        learner.load(path / role)
    return TrainerState(step=int(payload["step"]), sampler=payload["sampler"], rng=payload["rng"])


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
