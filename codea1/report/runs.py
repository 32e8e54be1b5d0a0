"""Read a training run directory for the report: metrics series, resolved config, evaluation files.

A run directory holds ``metrics.jsonl`` (one JSON object per step), ``config.yaml`` and optionally
``eval/*.json``. Everything here is tolerant of damage that a crash or a half-written run leaves
behind: unreadable lines, files and values are skipped and described in ``RunData.warnings``; only
a run directory that does not exist (or holds neither metrics nor a config) is an error. Nothing
is written.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from codea1.core.bootstrap import PairedDelta, statistic_interval
from codea1.core.comparison import compare_records
from codea1.core.eval_estimators import Estimator, estimator_for
from codea1.results_file import read_records
from codea1.tracking import METRICS_FILE, read_eval_points, step_file_name

CONFIG_FILE = "config.yaml"
EVAL_DIR = "eval"


class ReportError(Exception):
    """A run directory cannot be reported on (missing, or not a run directory)."""


@dataclass(frozen=True)
class Series:
    """One metric over training: ``steps[i]`` is the step of ``values[i]`` (NaN = logged as null)."""

    steps: np.ndarray
    values: np.ndarray
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    """A 95 % band around ``values`` (evaluation points with per-problem results), else None."""

    def last_finite(self) -> float | None:
        """The last finite value, or None when there is none."""
        finite = np.flatnonzero(np.isfinite(self.values))
        return float(self.values[finite[-1]]) if finite.size else None


@dataclass(frozen=True)
class EvalTable:
    """The newest evaluation file of a run: benchmark → metric name → value."""

    source: str
    """File name inside ``eval/``."""
    step: int | None
    """Training step the file belongs to (from its ``step`` field or its name), if known."""
    rows: dict[str, dict[str, Any]]
    n_files: int
    """How many evaluation files the run has."""
    baseline_step: int | None = None
    """Step of the earliest evaluation the newest one is compared with (``deltas``), if any."""
    deltas: dict[str, PairedDelta] = field(default_factory=dict)
    """Benchmark → paired bootstrap of newest vs earliest, when both files name their per-problem
    results (``"results"``, written by ``codea1 eval code --output``) and those cover the same problems."""


@dataclass
class RunData:
    """Everything the report shows about one run."""

    name: str
    path: Path
    series: dict[str, Series] = field(default_factory=dict)
    n_rows: int = 0
    """Complete metric lines read."""
    config_text: str | None = None
    config: dict[str, Any] | None = None
    """``config.yaml`` parsed, or None when absent or not valid YAML."""
    eval_table: EvalTable | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def last_step(self) -> int | None:
        """The highest step that has metrics."""
        ends = [int(s.steps[-1]) for s in self.series.values() if s.steps.size]
        return max(ends) if ends else None


def load_runs(paths: list[Path]) -> list[RunData]:
    """Load every run; names are directory names, made unique with parent folders when they clash."""
    if not paths:
        raise ReportError("no run directory given")
    names = unique_names([Path(p) for p in paths])
    return [load_run(Path(p), name) for p, name in zip(paths, names, strict=True)]


def unique_names(paths: list[Path]) -> list[str]:
    """Short display names: the directory name, plus as many parents as needed to tell runs apart."""
    resolved = [p.resolve() for p in paths]
    depth = 1
    while True:
        names = ["/".join(p.parts[-depth:]) for p in resolved]
        if len(set(names)) == len(names) or depth >= max(len(p.parts) for p in resolved):
            return names
        depth += 1


def load_run(path: Path, name: str | None = None) -> RunData:
    """Read one run directory (see the module docstring for what is tolerated)."""
    if not path.exists():
        raise ReportError(f"run directory {path} does not exist")
    if not path.is_dir():
        raise ReportError(f"{path} is not a directory (expected a training run directory)")
    has_metrics = (path / METRICS_FILE).is_file()
    if not has_metrics and not (path / CONFIG_FILE).is_file():
        raise ReportError(f"{path} is not a training run directory (no {METRICS_FILE} and no {CONFIG_FILE})")
    run = RunData(name=name or path.name, path=path)
    if has_metrics:
        rows = read_metric_rows(path / METRICS_FILE, run.warnings)
        run.n_rows = len(rows)
        run.series = rows_to_series(rows, run.warnings)
        if not rows:
            run.warnings.append(f"{METRICS_FILE} has no complete step yet")
    else:
        run.warnings.append(f"no {METRICS_FILE}: nothing to plot for this run")
    _read_config(run)
    _read_evals(run)
    _read_in_run_evals(run)
    return run


def read_metric_rows(path: Path, warnings: list[str]) -> list[dict[str, Any]]:
    """Parse ``metrics.jsonl``; lines that are not a JSON object with an integer ``step`` are skipped.

    A broken *last* line is the normal trace of a crash mid-write and is reported as torn; a broken
    line elsewhere is reported as corrupt. Both are skipped, never fatal.
    """
    raw = path.read_bytes().decode("utf-8", errors="replace")
    lines = raw.split("\n")
    last_index = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    rows: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == last_index:
                warnings.append(f"{path.name} line {i + 1} is incomplete (torn by a crash?); skipped")
            else:
                warnings.append(f"{path.name} line {i + 1} is not valid JSON; skipped")
            continue
        step = row.get("step") if isinstance(row, dict) else None
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not float(step).is_integer():
            warnings.append(f"{path.name} line {i + 1} has no integer 'step'; skipped")
            continue
        rows.append(row)
    return rows


def rows_to_series(rows: list[dict[str, Any]], warnings: list[str]) -> dict[str, Series]:
    """One :class:`Series` per numeric key, ordered by step.

    Nested objects are flattened with ``/``. When a step appears twice (a resumed run whose old
    lines were not truncated) the later line wins. Null becomes NaN (a gap in the plot); strings
    and other non-numbers are ignored.
    """
    by_step: dict[int, dict[str, float]] = {}
    repeated = 0
    for row in rows:
        step = int(row["step"])
        values = {k: v for k, v in _flatten(row).items() if k != "step"}
        numeric = {k: _as_float(v) for k, v in values.items()}
        if step in by_step:
            repeated += 1
        by_step.setdefault(step, {}).update({k: v for k, v in numeric.items() if v is not None})
    if repeated:
        warnings.append(f"{repeated} step(s) logged more than once; the later line wins")
    keys = sorted({k for values in by_step.values() for k in values})
    steps = sorted(by_step)
    series: dict[str, Series] = {}
    for key in keys:
        xs = [s for s in steps if key in by_step[s]]
        series[key] = Series(
            np.array(xs, dtype=np.int64), np.array([by_step[s][key] for s in xs], dtype=float)
        )
    return series


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = value
    return out


def _as_float(value: Any) -> float | None:
    """A plottable number (None → NaN), or None for values that are not numbers."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _read_config(run: RunData) -> None:
    path = run.path / CONFIG_FILE
    if not path.is_file():
        run.warnings.append(f"no {CONFIG_FILE}")
        return
    run.config_text = path.read_text(encoding="utf-8", errors="replace")
    try:
        parsed = yaml.safe_load(run.config_text)
    except yaml.YAMLError as e:
        run.warnings.append(f"{CONFIG_FILE} is not valid YAML ({str(e).splitlines()[0]}); shown as text")
        return
    if isinstance(parsed, dict):
        run.config = parsed
    else:
        run.warnings.append(f"{CONFIG_FILE} is not a mapping; shown as text")


_STEP_IN_NAME = re.compile(r"(\d+)")
_NOT_A_SCORE = frozenset({"problems", "improved", "worsened"})
"""Eval fields that are counts, not scores over steps (kept in the table, not plotted)."""
_STEP_WORD_IN_NAME = re.compile(r"step[_-]?(\d+)", re.IGNORECASE)


def _read_evals(run: RunData) -> None:
    """Pick the newest readable ``eval/*.json`` and add per-step eval series (``eval/<bench>/<metric>``)."""
    directory = run.path / EVAL_DIR
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    loaded: list[tuple[float, float, str, int | None, dict[str, dict[str, Any]]]] = []
    results: dict[str, str] = {}  # file name -> its per-problem results file
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, OSError) as e:
            run.warnings.append(f"{EVAL_DIR}/{path.name} is unreadable ({type(e).__name__}); skipped")
            continue
        if not isinstance(data, dict):
            run.warnings.append(f"{EVAL_DIR}/{path.name} is not a JSON object; skipped")
            continue
        step = _eval_step(path, data)
        rows = {bench: _flatten(metrics) for bench, metrics in data.items() if isinstance(metrics, dict)}
        if not rows:
            run.warnings.append(f"{EVAL_DIR}/{path.name} has no benchmark results; skipped")
            continue
        # newest = highest step; a file without a step (e.g. final.json) counts as after all steps
        order = math.inf if step is None else float(step)
        loaded.append((order, path.stat().st_mtime, path.name, step, rows))
        if isinstance(data.get("results"), str):
            results[path.name] = data["results"]
    if not loaded:
        return
    loaded.sort(key=lambda item: item[:3])
    # every file of the newest step (e.g. one per benchmark) joins the table; later names win ties
    newest = sorted((item for item in loaded if item[0] == loaded[-1][0]), key=lambda item: item[2])
    merged: dict[str, dict[str, Any]] = {}
    for *_, file_rows in newest:
        merged.update(file_rows)
    source = ", ".join(item[2] for item in newest)
    baseline_step, deltas = _deltas_to_earliest(run, loaded, newest, results)
    run.eval_table = EvalTable(
        source=source, step=loaded[-1][3], rows=merged, n_files=len(loaded),
        baseline_step=baseline_step, deltas=deltas,
    )  # fmt: skip
    _add_eval_series(run, [(s, r) for _, _, _, s, r in loaded if s is not None])


def _deltas_to_earliest(
    run: RunData, loaded: list[Any], newest: list[Any], results: dict[str, str]
) -> tuple[int | None, dict[str, PairedDelta]]:
    """Per benchmark of the newest files: the paired delta against the earliest file of that benchmark."""
    deltas: dict[str, PairedDelta] = {}
    baseline_step: int | None = None
    for _, _, name, _, rows in newest:
        earlier = [item for item in loaded if item[0] < newest[0][0] and set(item[4]) & set(rows)]
        if not earlier or name not in results or earlier[0][2] not in results:
            continue
        first = earlier[0]
        before = _read_records(run, results[first[2]])
        after = _read_records(run, results[name])
        if before is None or after is None:
            continue
        try:
            found = compare_records(before, after, resamples=2_000)
        except ValueError as e:
            run.warnings.append(f"{EVAL_DIR}/{name} vs {first[2]}: not compared ({e})")
            continue
        deltas.update({bench: d for bench, d in found.items() if bench in rows})
        baseline_step = first[3]
    return baseline_step, deltas


def _read_records(run: RunData, path_text: str) -> list[dict[str, Any]] | None:
    """The per-problem records of an ``eval code`` results file (header line dropped), or None."""
    path = Path(path_text)
    try:
        return read_records(path)
    except (OSError, ValueError) as e:
        run.warnings.append(f"evaluation results {path} are unreadable ({e}); no delta")
        return None


def _eval_step(path: Path, data: dict[str, Any]) -> int | None:
    step = data.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        return step
    named = _STEP_WORD_IN_NAME.search(path.stem)  # step_8-humanevalplus.json -> 8
    if named:
        return int(named.group(1))
    numbers = _STEP_IN_NAME.findall(path.stem)
    return int(numbers[-1]) if numbers else None


def _add_eval_series(run: RunData, evals: list[tuple[int, dict[str, dict[str, Any]]]]) -> None:
    """Eval results by step become ``eval/<bench>/<metric>`` series unless metrics.jsonl has them."""
    points: dict[str, dict[int, float]] = {}
    for step, rows in evals:
        for bench, metrics in rows.items():
            for metric, value in metrics.items():
                if metric in _NOT_A_SCORE:
                    continue
                number = _as_float(value)
                if number is not None:
                    points.setdefault(f"eval/{bench}/{metric}", {})[step] = number
    for key, by_step in points.items():
        if key not in run.series:
            xs = sorted(by_step)
            run.series[key] = Series(np.array(xs, dtype=np.int64), np.array([by_step[s] for s in xs]))


def _read_in_run_evals(run: RunData) -> None:
    """The run's own evaluation points (``eval.jsonl``, docs/metrics.md) become ``eval/...`` series,
    with a 95 % bootstrap band over problems for the keys with a per-problem estimator
    (:mod:`codea1.core.eval_estimators`: the band resamples the rows of the very estimate plotted);
    when no ``eval/*.json`` file made the table, the newest point fills it, with the paired delta
    of the coder since step 0."""
    try:
        points = read_eval_points(run.path)
    except OSError as e:
        run.warnings.append(f"eval.jsonl is unreadable ({e}); no evaluation points")
        return
    if not points:
        return
    steps = sorted(points)
    keys = sorted({k for row in points.values() for k in row if k.startswith("eval/") and k != "eval/time_s"})
    records = {step: _point_records(run, step) for step in steps}
    for key in keys:
        found = [_as_float(points[s].get(key)) for s in steps]
        values = np.array([math.nan if v is None else v for v in found])
        low = high = None
        estimator = estimator_for(key)
        if estimator is not None:
            bands = [_band(records[s].get(estimator.task), estimator) for s in steps]
            low = np.array([100.0 * b[0] if b else math.nan for b in bands])
            high = np.array([100.0 * b[1] if b else math.nan for b in bands])
        series = Series(np.array(steps, dtype=np.int64), values, low, high)
        run.series.setdefault(key, series)
    if run.eval_table is None:
        last = steps[-1]
        rows: dict[str, dict[str, Any]] = {}
        for key, value in points[last].items():
            if key.startswith("eval/") and key.count("/") == 2:
                _, role, metric = key.split("/")
                rows.setdefault(role, {})[metric] = value
        deltas: dict[str, PairedDelta] = {}
        before, after = records[steps[0]].get("code"), records[last].get("code")
        if last != steps[0] and before and after:
            try:
                found = compare_records(before, after, resamples=2_000)
                deltas = {"coder": found["all"] if "all" in found else next(iter(found.values()))}
            except ValueError as e:
                run.warnings.append(f"eval step {last} vs step {steps[0]}: not compared ({e})")
        run.eval_table = EvalTable(source="eval.jsonl", step=last, rows=rows, n_files=len(steps),
                                   baseline_step=steps[0] if deltas else None, deltas=deltas)  # fmt: skip


def _point_records(run: RunData, step: int) -> dict[str, list[dict[str, Any]]]:
    """The per-problem records of one evaluation point by task (``code``, ``tests``)."""
    directory = run.path / EVAL_DIR / step_file_name(step)
    out: dict[str, list[dict[str, Any]]] = {}
    for task in ("code", "tests"):
        files = sorted(directory.glob(f"{task}-*.jsonl")) if directory.is_dir() else []
        if files:
            try:
                out[task] = read_records(files[-1])
            except (OSError, ValueError) as e:
                run.warnings.append(f"{files[-1]} is unreadable ({e}); no band at step {step}")
    return out


def _band(records: list[dict[str, Any]] | None, estimator: Estimator) -> tuple[float, float] | None:
    if not records:
        return None
    try:
        return statistic_interval(estimator.rows(records), estimator.statistic)
    except ValueError:
        return None
