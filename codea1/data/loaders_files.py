"""Read problem files (JSONL, gzipped JSONL, parquet), detect their format and convert rows.

Formats, detected from the columns of the first readable row:

* ours: ``id, question, entry_point, reference`` (+ optional fields), the form of ``Problem.to_dict``;
* the evalplus parquet (``GT_code, problem, test, extra_info``) and the reference implementation's
  parquet (``GT_code`` with ``clean_description`` or ``prompt``): see ``loaders_reference``;
* evalplus's own JSONL (``task_id, prompt, canonical_solution, entry_point``): see ``loaders_evalplus``.
"""

from __future__ import annotations

import difflib
import gzip
import json
import warnings
import zlib
from importlib import resources
from pathlib import Path
from typing import Any

from codea1.data.problems import DataError, DataWarning, LoadedRow
from codea1.types import Problem

OUR_COLUMNS = frozenset({"id", "question", "entry_point", "reference"})
OUR_OPTIONAL_COLUMNS = frozenset({"golden_tests", "imports", "source", "harness", "split", "metadata"})
EVALPLUS_PARQUET_COLUMNS = frozenset({"GT_code", "problem", "test", "extra_info"})
EVALPLUS_JSONL_COLUMNS = frozenset({"task_id", "prompt", "canonical_solution", "entry_point"})

RawRow = tuple[int, dict[str, Any] | None, tuple[str, str] | None]
"""``(row number, decoded row or None, (field, reason) when it could not be decoded)``."""


def read_raw(path: Path) -> list[RawRow]:
    """Decode every row of a JSONL, JSONL.gz or parquet file; undecodable rows carry a reason."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        return _read_parquet(path)
    if name.endswith(".jsonl.gz") or name.endswith(".json.gz"):
        try:
            data = gzip.decompress(path.read_bytes())
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: not a readable gzip file ({e})") from None
        return _decode_jsonl(data)
    if name.endswith(".jsonl") or name.endswith(".json"):
        return _decode_jsonl(path.read_bytes())
    raise DataError(f"{path}: unsupported file type (expected .jsonl, .jsonl.gz or .parquet)")


def _decode_jsonl(data: bytes) -> list[RawRow]:
    rows: list[RawRow] = []
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            rows.append(
                (
                    n,
                    None,
                    ("<encoding>", f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"),
                )
            )
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            rows.append((n, None, ("<json>", f"not valid JSON ({e.msg} at column {e.colno})")))
            continue
        except RecursionError:
            rows.append((n, None, ("<json>", "not usable JSON (nested too deeply)")))
            continue
        if not isinstance(obj, dict):
            rows.append((n, None, ("<json>", f"expected a JSON object, got {type(obj).__name__}")))
            continue
        rows.append((n, obj, None))
    return rows


def _read_parquet(path: Path) -> list[RawRow]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{path}: cannot read parquet ({e})") from None
    rows: list[RawRow] = []
    for n, batch_row in enumerate(_iter_parquet_rows(table, path), start=1):
        rows.append((n, batch_row, None) if isinstance(batch_row, dict) else (n, None, batch_row))
    return rows


def _iter_parquet_rows(table: Any, path: Path) -> list[dict[str, Any] | tuple[str, str]]:
    try:
        return list(table.to_pylist())
    except UnicodeDecodeError:
        pass
    out: list[dict[str, Any] | tuple[str, str]] = []
    for i in range(table.num_rows):  # slow path: find which rows hold invalid UTF-8
        try:
            out.append(table.slice(i, 1).to_pylist()[0])
        except UnicodeDecodeError as e:
            out.append(("<encoding>", f"invalid UTF-8 ({e.reason})"))
    return out


def detect_format(columns: set[str]) -> str:
    """``ours``, ``evalplus_parquet``, ``reference`` or ``evalplus_jsonl``; ``""`` if none matches."""
    if OUR_COLUMNS <= columns:
        return "ours"
    if EVALPLUS_PARQUET_COLUMNS <= columns:
        return "evalplus_parquet"
    if "GT_code" in columns and ({"clean_description", "prompt", "problem"} & columns):
        return "reference"
    if EVALPLUS_JSONL_COLUMNS <= columns:
        return "evalplus_jsonl"
    return ""


def nearest_column(name: str, known: frozenset[str]) -> str | None:
    """The known column ``name`` most likely stands for (``tests`` → ``golden_tests``), if any is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.5)
    return close[0] if close else None


def _columns_error(path: Path, columns: set[str]) -> DataError:
    """The error for rows no format matches: the missing columns of the closest format, if one is close."""
    formats = (
        ("ours", OUR_COLUMNS),
        ("evalplus's JSONL", EVALPLUS_JSONL_COLUMNS),
        ("the evalplus parquet", EVALPLUS_PARQUET_COLUMNS),
    )
    name, needed = max(formats, key=lambda f: len(f[1] & columns))
    if len(needed & columns) >= 2:
        missing = sorted(needed - columns)
        hints = [f"'{c}' (found '{u}'?)" for c in missing if (u := nearest_column(c, frozenset(columns)))]
        plural = "s" if len(missing) > 1 else ""
        return DataError(
            f"{path}: missing column{plural} {', '.join(repr(c) for c in missing)} "
            f"({name} needs {', '.join(sorted(needed))})" + (f"; rename {', '.join(hints)}" if hints else "")
        )
    return DataError(
        f"{path}: unrecognised columns {sorted(columns)}; expected ours ({', '.join(sorted(OUR_COLUMNS))}), "
        "the reference's (GT_code + clean_description/prompt) or evalplus's "
        f"({', '.join(sorted(EVALPLUS_JSONL_COLUMNS))})"
    )


def _warn_unknown_columns(path: Path, columns: set[str]) -> None:
    """A :class:`DataWarning` per column our format does not know, naming the nearest known one."""
    known = OUR_COLUMNS | OUR_OPTIONAL_COLUMNS
    for column in sorted(columns - known):
        near = nearest_column(column, known)
        hint = f" (did you mean '{near}'?)" if near else ""
        warnings.warn(f"{path}: unknown column '{column}'{hint} is ignored", DataWarning, stacklevel=3)


def read_file(path: Path, *, source: str = "") -> list[LoadedRow]:
    """Read a problem file in any supported format. ``source`` overrides the rows' source name.

    The format is detected from the columns of all readable rows together; in our format, each
    column it does not know raises a :class:`DataWarning` naming the nearest known column.
    """
    from codea1.data import loaders_evalplus, loaders_reference

    raw = read_raw(path)
    columns: set[str] = set()
    for _, obj, _ in raw:
        if obj is not None:
            columns.update(str(k) for k in obj)
    if not columns:
        if raw:  # every row failed to decode, or holds no column: report them
            return [
                LoadedRow(str(path), n, None, [issue] if issue else [("row", "an empty object")])
                for n, _, issue in raw
            ]
        raise DataError(f"{path}: no rows")
    fmt = detect_format(columns)
    convert = {
        "ours": convert_ours,
        "evalplus_parquet": loaders_reference.convert_evalplus_parquet,
        "reference": loaders_reference.convert_reference,
        "evalplus_jsonl": loaders_evalplus.convert_evalplus_jsonl,
    }.get(fmt)
    if convert is None:
        raise _columns_error(path, columns)
    if fmt == "ours":
        _warn_unknown_columns(path, columns)
    out: list[LoadedRow] = []
    for n, obj, issue in raw:
        if obj is None:
            out.append(LoadedRow(str(path), n, None, [issue] if issue else []))
            continue
        problem, issues = convert(obj, source)
        out.append(LoadedRow(str(path), n, problem, issues))
    return out


def _text(row: dict[str, Any], key: str, issues: list[tuple[str, str]], *, required: bool = True) -> str:
    """``row[key]`` as a string; records an issue when it is missing (if required) or not a string."""
    value = row.get(key)
    if value is None:
        if required:
            issues.append((key, "missing"))
        return ""
    if not isinstance(value, str):
        issues.append((key, f"expected a string, got {type(value).__name__}"))
        return ""
    return value


def convert_ours(row: dict[str, Any], source: str = "") -> tuple[Problem | None, list[tuple[str, str]]]:
    """A row in the ``Problem.to_dict`` form."""
    issues: list[tuple[str, str]] = []
    tests = row.get("golden_tests") or []
    if isinstance(tests, str) or not isinstance(tests, (list, tuple)):
        issues.append(("golden_tests", "expected a list of strings"))
        tests = []
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        issues.append(("metadata", "expected an object"))
        metadata = {}
    harness = row.get("harness")
    problem = Problem(
        id=_text(row, "id", issues),
        question=_text(row, "question", issues),
        entry_point=_text(row, "entry_point", issues),
        reference=_text(row, "reference", issues),
        golden_tests=tuple(tests),
        imports=_text(row, "imports", issues, required=False),
        source=source or _text(row, "source", issues, required=False),
        harness=harness if isinstance(harness, str) and harness else None,
        split=_text(row, "split", issues, required=False),
        metadata=dict(metadata),
    )
    return problem, issues


def read_demo(split: str) -> list[LoadedRow]:
    """The demo problems shipped in the package (``train`` or ``heldout``)."""
    ref = resources.files("codea1.data").joinpath("demo", f"{split}.jsonl")
    with resources.as_file(ref) as path:
        if not path.is_file():
            raise DataError(
                f"demo split {split!r} not found at {path} (is the package installed with its data?)"
            )
        return read_file(Path(path))
