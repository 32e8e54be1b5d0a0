"""Decode problem files into raw rows: JSONL, gzipped JSONL, parquet and (``.json``) a JSON array of
objects (UnLeakedTestBench's files), one dict per row.

Rows that cannot be decoded (invalid UTF-8, not JSON, not an object) carry a reason instead of
being dropped, so the checks can report them with their row number; which format the rows are in
is for ``codea1.data.sources`` to decide.
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from codea1.data.rows import DataError

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
    if name.endswith(".json"):
        data = path.read_bytes().removeprefix(codecs.BOM_UTF8)
        return _decode_json_array(data) if data.lstrip().startswith(b"[") else _decode_jsonl(data)
    if name.endswith(".jsonl"):
        return _decode_jsonl(path.read_bytes())
    raise DataError(f"{path}: unsupported file type (expected .jsonl, .jsonl.gz, .json or .parquet)")


def _decode_jsonl(data: bytes) -> list[RawRow]:
    rows: list[RawRow] = []
    data = data.removeprefix(codecs.BOM_UTF8)  # an editor's byte-order mark is not part of the first row
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


def _decode_json_array(data: bytes) -> list[RawRow]:
    """A ``.json`` file holding one array of objects; the row number is the element's 1-based index."""
    try:
        items = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        return [(1, None, ("<encoding>", f"invalid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})"))]
    except json.JSONDecodeError as e:
        return [(1, None, ("<json>", f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"))]
    except RecursionError:
        return [(1, None, ("<json>", "not usable JSON (nested too deeply)"))]
    rows: list[RawRow] = []
    for n, obj in enumerate(items, start=1):
        if isinstance(obj, dict):
            rows.append((n, obj, None))
        else:
            rows.append((n, None, ("<json>", f"expected a JSON object, got {type(obj).__name__}")))
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
