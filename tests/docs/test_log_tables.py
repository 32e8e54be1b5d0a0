"""docs/LOG.md's tables are re-derived from the results files committed under docs/results/
(``scripts/derive_log_tables.py``), and a changed number, or an unmarked table, fails."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "derive_log_tables", ROOT / "scripts" / "derive_log_tables.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("derive_log_tables", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_log_table_since_2026_12_05_is_re_derived_or_marked() -> None:
    assert _script().check(ROOT / "docs" / "LOG.md", ROOT / "docs" / "results") == []


def _rec(pid: str, valid: int, killed: int) -> dict:
    return {"id": pid, "source": "demo", "k": 4, "tests": [{"call": "f(1)", "predicted": "1"}] * valid,
            "valid": valid, "mutants": 4, "equivalent": 0, "killed": killed, "mutation_score": killed / 4,
            "line_coverage": 100.0, "branch_coverage": 100.0, "wrong_codes": 0, "detected": 0}  # fmt: skip


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text(json.dumps({"run_key": {"k": 4}}) + "\n" + "".join(json.dumps(r) + "\n" for r in rows))


LOG = """# log

## 2026-12-04 — older: not checked

| a | b |
|---|---|
| x | 1 |

## 2026-12-09 — a new entry

| tester | mut@4 | killed, B − A |
|---|--:|---|
| A | 50.00 | |
| B | 75.00 | **+25.0 [+0.0, +50.0]**, 1.00 |
"""


def _place(tmp_path: Path, log: str) -> tuple[Path, Path]:
    folder = tmp_path / "results" / "2026-12-09-new"
    folder.mkdir(parents=True)
    _write(folder / "a.jsonl", [_rec("p1", 4, 2), _rec("p2", 4, 2)])
    _write(folder / "b.jsonl", [_rec("p1", 4, 4), _rec("p2", 4, 2)])
    summary = {"kind": "summary", "k": 4, "metric": "mut@4"}
    compare = {"kind": "compare", "before": ["a.jsonl"], "after": ["b.jsonl"], "metric": "killed"}
    cells = [
        {"row": "A", "column": "mut@4", "derive": {**summary, "files": ["a.jsonl"]}, "format": "{value:.2f}"},
        {"row": "B", "column": "mut@4", "derive": {**summary, "files": ["b.jsonl"]}, "format": "{value:.2f}"},
        {"row": "B", "column": "killed, B − A", "derive": compare,
         "format": "{delta:+.1f} [{ci_low:+.1f}, {ci_high:+.1f}], {p_two_sided:.2f}"},
    ]  # fmt: skip
    manifest = {"entry": "2026-12-09 — a new entry", "tables": [
        {"header": "| tester | mut@4 | killed, B − A |", "command": "codea1 eval tests ...", "cells": cells}]}  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))
    path = tmp_path / "LOG.md"
    path.write_text(log)
    return path, tmp_path / "results"


def test_a_changed_number_or_file_fails_and_names_the_cell(tmp_path: Path) -> None:
    check = _script().check
    log, results = _place(tmp_path, LOG)
    assert check(log, results) == []
    log.write_text(LOG.replace("| B | 75.00 |", "| B | 75.01 |"))
    (found,) = check(log, results)
    assert "row 'B', column 'mut@4'" in found and "'75.01'" in found and "'75.00'" in found
    log.write_text(LOG.replace("1.00 |", "0.50 |"))  # the one-sided p where the two-sided one belongs
    (found,) = check(log, results)
    assert "killed, B − A" in found
    log.write_text(LOG)
    _write(results / "2026-12-09-new" / "b.jsonl", [_rec("p1", 4, 3), _rec("p2", 4, 2)])
    assert len(check(log, results)) == 2  # the file changed under the LOG: both cells of B differ


def test_a_table_without_files_must_be_marked(tmp_path: Path) -> None:
    check = _script().check
    extra = "\n## 2026-12-10 — a table whose files are gone\n\n| x | y |\n|---|---|\n| a | 1 |\n"
    log, results = _place(tmp_path, LOG + extra)
    (found,) = check(log, results)
    assert "neither derived" in found and "2026-12-10" in found
    log.write_text(LOG + extra + "\n*Not re-derivable (per-problem files not kept).*\n")
    assert check(log, results) == []
    assert _script().main(["--log", str(log), "--results", str(results)]) == 0
