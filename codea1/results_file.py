"""The per-problem results file of an evaluation, and the atomic writes it is made with.

A results file holds one JSON object per problem, preceded by a header line naming the run key
(model id, dataset hash, settings). Re-running with the same key skips the problems already in the
file; a different key is refused rather than silently mixed. Files are rewritten through a temporary
name and renamed, so a crash never leaves a half-written file. The evaluation writes these files
(:class:`ResultStore`); ``eval compare`` and the report read them (:func:`read_records`).
"""

from __future__ import annotations

import codecs
import glob
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HEADER_KEY = "run_key"
"""The field of a results file's header line: ``{"run_key": key}``."""


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: Path) -> Any:
    """Read a JSON file; raises ``ValueError`` naming the file when it is not valid JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except RecursionError:
        raise ValueError(f"{path}: not usable JSON (nested too deeply)") from None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL file of objects; raises ``ValueError`` naming the line of any bad record.

    A bad record is one that is not UTF-8, not JSON, not an object, or holds a string that is not
    text (a lone ``\\udXXX`` surrogate escape, which no later step could encode).
    """
    rows: list[dict[str, Any]] = []
    data = path.read_bytes().removeprefix(codecs.BOM_UTF8)  # an editor's byte-order mark
    for i, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path}:{i}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
            ) from None
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: not valid JSON ({e})") from None
        except RecursionError:
            raise ValueError(f"{path}:{i}: not usable JSON (nested too deeply)") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{i}: expected a JSON object, got {type(row).__name__}")
        if "\\u" in line:
            try:
                json.dumps(row, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"{path}:{i}: a string holds a lone surrogate escape (not text)") from None
        rows.append(row)
    return rows


SLUG_CHARS = 60
"""The longest model part of a results file's name (its end: a path's last parts)."""
SEPARATORS = "_-."
"""Where a long slug may start."""


def slug(text: str) -> str:
    """A file-name-safe form of ``text`` (model ids and paths become readable names); a long one
    keeps its last :data:`SLUG_CHARS` characters, cut after a separator (``_``, ``-``, ``.``) so
    that no word is cut in two."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")
    if len(s) > SLUG_CHARS:
        tail = s[-SLUG_CHARS:]
        if s[-SLUG_CHARS - 1] not in SEPARATORS:  # the tail starts mid-word: drop that word's end
            starts = [i + 1 for i, c in enumerate(tail[:-1]) if c in SEPARATORS]
            tail = tail[starts[0] :] if starts else tail
        s = tail
    return s or "model"


def run_key_digest(key: Mapping[str, Any]) -> str:
    """A short stable hash of a run key."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


class ResultStore:
    """Per-problem results of one evaluation run, resumable, in ``<dir>/<task>-<model>-<digest>.jsonl``.

    ``key`` identifies the run (model id, dataset hash, sampling settings); records are dicts with an
    ``"id"`` field. The header line is ``{"run_key": key}``.
    """

    def __init__(self, results_dir: Path, task: str, key: Mapping[str, Any]):
        self.key = dict(key)
        model = slug(str(self.key.get("model", "model")))
        digest = run_key_digest(self.key)
        self.path = Path(results_dir) / f"{task}-{model}-{digest}.jsonl"
        if not self.path.exists():  # a file of this run key named by an earlier version's slug
            earlier = sorted(Path(results_dir).glob(f"{glob.escape(task)}-*-{digest}.jsonl"))
            self.path = earlier[0] if earlier else self.path
        self.records: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            rows = read_jsonl(self.path)
            if not rows or rows[0].get(HEADER_KEY) != json.loads(json.dumps(self.key)):
                raise ValueError(f"{self.path}: exists but was written for a different run key")
            self.records = {r["id"]: r for r in rows[1:]}

    def done(self, problem_id: str) -> bool:
        """True when ``problem_id`` already has a stored result."""
        return problem_id in self.records

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        """Store ``records`` (replacing any with the same id) and rewrite the file atomically."""
        for r in records:
            self.records[r["id"]] = r
        lines = [json.dumps({HEADER_KEY: self.key})]
        lines += [json.dumps(r) for r in self.records.values()]
        write_text_atomic(self.path, "\n".join(lines) + "\n")


def read_records(path: Path) -> list[dict[str, Any]]:
    """The per-problem records of a results file, header line dropped; ``ValueError`` names a bad line."""
    rows = read_jsonl(path)
    if rows and HEADER_KEY in rows[0]:
        rows = rows[1:]
    return rows
