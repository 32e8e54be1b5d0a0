"""Re-derive docs/LOG.md's tables from the results files committed under docs/results/, and fail on
any difference (issue: results anyone can check).

Every table of a LOG entry dated ``SINCE`` or later is either

- **derived**: a folder ``docs/results/<date>-<slug>/`` holds the per-problem results files of the
  entry and a ``manifest.json`` that names the entry (its heading, without ``## ``), each table (its
  header row, as written) with the command that made it, and for each derived cell its row (the
  row's first cell), its column (a header cell), how it is computed from the folder's files and
  how it is printed. The check computes every cell, prints it with the cell's format and compares
  the text with the LOG's cell (bold marks aside): one changed digit in the LOG, or in a file, fails;
- or **marked** ``*Not re-derivable ...*`` on a line of its own right below the table, with the
  reason (the per-problem files of most 2026-12-05 tables were not kept).

A table that is neither fails the check, so a new entry's tables need a manifest (or a marker and
its reason) before the test suite passes. Cell computations (``derive.kind``):

- ``summary``: what ``codea1 eval tests`` prints, over the records of ``files`` (one results JSONL)
  kept to the problems of the data spec ``problems`` (optional): ``metric`` is one of its columns
  (``validity``, ``pass@K``, ``mut@K``, ``Mul``, ...), ``k`` the suite size; format field ``value``.
- ``compare``: what ``codea1 eval compare --before ... --after ...`` computes (each side's files
  averaged per problem, ``metric``, ``problems``, ``resamples``, ``seed``, ``confidence``); format
  fields ``before``, ``after``, ``delta``, ``ci_low``, ``ci_high`` (points), ``p_two_sided``,
  ``improved``, ``worsened``, ``problems``; ``group`` picks the benchmark (default: ``all`` when
  there are several, else the only one).

Usage: ``python scripts/derive_log_tables.py [--log docs/LOG.md] [--results docs/results]``; prints
each difference and exits 1 when there is one (tests/docs/test_log_tables.py runs it in the suite).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SINCE = "2026-12-05"
"""Entries from this date on are checked (the issue that asked for results anyone can check)."""
MARKER = re.compile(r"^\*Not re-derivable\b.+\*$")
"""The line right below a table whose files are gone: ``*Not re-derivable (reason).*``."""
HEADING = re.compile(r"^## (\d{4}-\d{2}-\d{2}) — .+$")


@dataclass
class Table:
    """One markdown table of the LOG: its header cells, and its body rows by their first cell."""

    header: str
    columns: list[str]
    rows: dict[str, list[str]]
    line: int
    """1-based line of the header row."""
    marked: bool = False


@dataclass
class Entry:
    heading: str
    date: str
    tables: list[Table] = field(default_factory=list)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_log(text: str) -> list[Entry]:
    """The LOG's entries (``## DATE — title``) with their tables and whether each is marked."""
    entries: list[Entry] = []
    lines = text.splitlines()
    i = 0
    in_code = False
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_code = not in_code
        match = HEADING.match(line) if not in_code else None
        if match:
            entries.append(Entry(line[3:], match.group(1)))
        elif (
            not in_code and entries and line.startswith("|") and i + 1 < len(lines) and _is_rule(lines[i + 1])
        ):
            start = i
            rows: dict[str, list[str]] = {}
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = _cells(lines[i])
                rows.setdefault(cells[0], cells)
                i += 1
            nxt = lines[i] if i < len(lines) else ""
            after = lines[i + 1] if nxt == "" and i + 1 < len(lines) else nxt
            marked = bool(MARKER.match(after.strip()))
            entries[-1].tables.append(Table(line.strip(), _cells(line), rows, start + 1, marked))
            continue
        i += 1
    return entries


def _is_rule(line: str) -> bool:
    return line.startswith("|") and set(line.replace("|", "").strip()) <= set("-: ")


def _plain(cell: str) -> str:
    return cell.replace("**", "").strip()


def derive_cell(spec: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The format fields of one cell, computed from the folder's files (module docstring)."""
    from codea1.results_file import read_records

    kind = spec.get("kind")
    if kind == "summary":
        from codea1.eval.suite_eval import summarize_tests

        (name,) = spec["files"]
        records = _kept(read_records(folder / name), spec.get("problems"))
        groups = summarize_tests(records, int(spec["k"]))
        return {"value": groups["all" if "all" in groups else next(iter(groups))][spec["metric"]]}
    if kind == "compare":
        from codea1.core.comparison import compare_sides, delta_table

        sides = [
            [_kept(read_records(folder / n), spec.get("problems")) for n in spec[s]]
            for s in ("before", "after")
        ]
        deltas = compare_sides(
            sides[0], sides[1], metric=spec.get("metric", "pass"), resamples=int(spec.get("resamples", 10_000)),
            seed=int(spec.get("seed", 0)), confidence=float(spec.get("confidence", 0.95)),
        )  # fmt: skip
        table = delta_table(deltas)
        row = table[spec.get("group") or ("all" if "all" in table else next(iter(table)))]
        level = next(k for k in row if k.endswith("_low"))[: -len("_low")]
        return {**row, "ci_low": row[f"{level}_low"], "ci_high": row[f"{level}_high"]}
    raise ValueError(f"unknown derive.kind {kind!r} (summary or compare)")


def _kept(records: Sequence[Mapping[str, Any]], problems: str | None) -> list[Mapping[str, Any]]:
    if not problems:
        return list(records)
    from codea1.core.comparison import restrict
    from codea1.data.problems import load_problems

    return restrict(records, {p.id for p in load_problems(problems)})


def check(log: Path, results: Path) -> list[str]:
    """Every difference between the LOG and what its results folders derive, and every table of an
    entry since ``SINCE`` that is neither derived nor marked; empty when the LOG checks out."""
    entries = {e.heading: e for e in parse_log(log.read_text(encoding="utf-8"))}
    problems: list[str] = []
    derived: set[tuple[str, int]] = set()
    for manifest_path in sorted(results.glob("*/manifest.json")):
        folder = manifest_path.parent
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        entry = entries.get(manifest["entry"])
        if entry is None:
            problems.append(f"{manifest_path}: no LOG entry '## {manifest['entry']}'")
            continue
        for spec in manifest["tables"]:
            table = next((t for t in entry.tables if t.header == spec["header"].strip()), None)
            if table is None:
                problems.append(
                    f"{manifest_path}: no table with header {spec['header']!r} in '{entry.heading}'"
                )
                continue
            derived.add((entry.heading, table.line))
            for cell in spec["cells"]:
                where = f"LOG line {table.line}, row {cell['row']!r}, column {cell['column']!r}"
                row = table.rows.get(cell["row"])
                if row is None or cell["column"] not in table.columns:
                    problems.append(f"{where}: no such cell (manifest {manifest_path})")
                    continue
                col = table.columns.index(cell["column"])
                logged = _plain(row[col]) if col < len(row) else ""
                try:
                    fields = derive_cell(cell["derive"], folder)
                    expected = cell["format"].format(**fields)
                except (OSError, ValueError, KeyError) as e:
                    problems.append(f"{where}: cannot derive ({type(e).__name__}: {e})")
                    continue
                if logged != expected:
                    problems.append(f"{where}: the LOG says {logged!r}, the files give {expected!r}")
    for entry in entries.values():
        if entry.date < SINCE:
            continue
        for table in entry.tables:
            if (entry.heading, table.line) not in derived and not table.marked:
                problems.append(
                    f"LOG line {table.line} ('{entry.heading[:60]}...'): a table neither derived by a "
                    "docs/results/*/manifest.json nor marked '*Not re-derivable (reason).*' below it"
                )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Print every difference; 0 when none, 1 otherwise."""
    root = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, default=root / "docs" / "LOG.md")
    parser.add_argument("--results", type=Path, default=root / "docs" / "results")
    args = parser.parse_args(argv)
    found = check(args.log, args.results)
    for line in found:
        print(line)
    if not found:
        print(f"{args.log}: every table since {SINCE} is re-derived from {args.results} or marked")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
