"""Compare training methods: paired differences of their runs' last evaluation point, per problem.

Each run directory holds ``config.yaml`` and its in-run evaluation points (``eval.jsonl`` and the
per-problem files ``eval/step_NNNNNN/{code,tests}-*.jsonl``, docs/metrics.md). Runs are comparable
only when they were evaluated alike (:data:`EVAL_BLOCK`: the same problems, seeds, sample counts);
otherwise :class:`~codea1.report.runs.ReportError` names the first field that differs.

A run's *method* is its ``train.method`` with every setting that makes a variant of it
(:data:`METHOD_KEYS`: the whole ``reward:`` section, the Mistake Book switch, the tester's view and
its white-box share), so a new reward term, once it is a ``reward.*`` key, tells its runs apart from
plain ``a1`` without a change here. Runs of one method that differ only in ``train.seed`` are its seeds: each problem's row
is averaged over them before pairing (one row per problem and method), so the pairing is by problem
and the noise measured is that of the problems, with the seeds' noise averaged inside each row.

For each pair of methods and each estimate of :mod:`codea1.core.eval_estimators`, on the training
problems (the evaluated problems that are in ``data.train``) and on the held-out ones separately:
``statistic(A) - statistic(B)`` with a paired bootstrap interval over problems and a sign-flip
p-value (:func:`codea1.core.bootstrap.paired_statistic`).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from codea1.config import RunConfig
from codea1.core.bootstrap import PairedDelta, paired_statistic
from codea1.core.eval_estimators import ESTIMATORS, Estimator, named_for
from codea1.report.runs import CONFIG_FILE, EVAL_DIR, ReportError, unique_names
from codea1.results_file import read_records
from codea1.tracking import EVAL_FILE, read_eval_points, step_file_name

EVAL_BLOCK = (
    "eval.data", "eval.limit", "eval.seed", "eval.n", "eval.temperature", "eval.top_p",
    "eval.max_new_tokens", "eval.tests", "eval.max_mutants", "eval.chunk", "data.train", "data.limit",
)  # fmt: skip
"""Settings every compared run must share: what was evaluated and how (the samples are paired by
problem and seed), and the training problems that split the evaluated ones."""

METHOD_KEYS = ("train.method", "reward.*", "mistake_book.enabled", "tester.view", "tester.whitebox_share")
"""Settings that make a method (shell patterns over dotted keys); runs that share them are seeds."""

INCIDENTAL = (
    "train.seed", "train.run_dir", "train.save_every", "train.keep_last", "preset", "tracking.*",
    "sandbox.workers", "engine.cache_dir", "engine.backend", "cluster.*", "eval.every", "eval.tester",
)  # fmt: skip
"""Settings that may differ between compared runs without a word; any other difference is noted."""


@dataclass(frozen=True)
class Method:
    """One method of the comparison and the runs (seeds) it has."""

    label: str
    """``train.method``, plus the variant settings that tell it from another method of that name."""
    runs: tuple[str, ...]
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class PairResult:
    """One estimate of one pair on one split: ``delta`` is ``A - B``; None with ``reason`` when not
    computable (a method without a tester, no problem in the split)."""

    split: str
    a: str
    b: str
    metric: str
    delta: PairedDelta | None
    reason: str = ""


@dataclass
class MethodComparison:
    """What ``codea1 compare`` prints."""

    step: int
    methods: list[Method]
    problems: dict[str, int]
    """Problems evaluated per split."""
    settings: dict[str, Any]
    """The shared evaluation block."""
    results: list[PairResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self, *, one_sided: bool = False) -> dict[str, Any]:
        """A JSON-able form, scores in percent (as the printed table); the p is two-sided
        (``p_two_sided``), and ``one_sided`` adds the one-sided p of "A is better"."""

        def delta(d: PairedDelta | None) -> dict[str, Any] | None:
            if d is None:
                return None
            return {
                "a": 100 * d.after, "b": 100 * d.before, "delta": 100 * d.delta, "ci_low": 100 * d.ci_low,
                "ci_high": 100 * d.ci_high, "confidence": d.confidence, "p_two_sided": d.p_two_sided,
                **({"p_one_sided_a_better": d.p_one_sided} if one_sided else {}), "a_better": d.improved,
                "b_better": d.worsened, "problems": d.problems, "resamples": d.resamples,
            }  # fmt: skip

        return {
            "step": self.step,
            "settings": self.settings,
            "methods": [
                {"label": m.label, "runs": list(m.runs), "seeds": list(m.seeds)} for m in self.methods
            ],
            "problems": self.problems,
            "pairs": [
                {
                    "split": r.split,
                    "a": r.a,
                    "b": r.b,
                    "metric": r.metric,
                    "result": delta(r.delta),
                    "reason": r.reason,
                }
                for r in self.results
            ],  # fmt: skip
            "notes": self.notes,
        }


@dataclass
class _Run:
    name: str
    path: Path
    config: dict[str, Any]
    """Flat: dotted key -> value (lists as JSON text), missing keys filled with today's defaults."""
    steps: list[int]


def compare_methods(
    run_dirs: Sequence[Path],
    *,
    step: int | None = None,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> MethodComparison:
    """Read the runs and pair their methods at ``step`` (default: the last point every run has).

    Raises :class:`ReportError` with one line when a run cannot be read, the runs were not
    evaluated alike, a step is missing, or fewer than two methods are given.
    """
    paths = [Path(p) for p in run_dirs]
    _check_distinct(paths)
    runs = [_load(p, name) for p, name in zip(paths, unique_names(paths), strict=True)]
    _check_same(runs, EVAL_BLOCK)
    notes: list[str] = []
    at = _step(runs, step, notes)
    methods, members = _methods(runs, notes)
    if len(methods) < 2:
        raise ReportError(
            f"all {len(runs)} runs are one method ({methods[0].label}): give runs of at least two methods"
        )
    records = {r.name: _records(r, at) for r in runs}
    ids = _problem_ids(records)
    training = _training_ids(runs[0])
    split_ids = {
        "training": [p for p in ids if p in training],
        "held-out": [p for p in ids if p not in training],
    }
    cmp = MethodComparison(
        step=at, methods=methods, problems={k: len(v) for k, v in split_ids.items()},
        settings={k: runs[0].config.get(k) for k in EVAL_BLOCK}, notes=notes,
    )  # fmt: skip
    k = int(runs[0].config["eval.tests"])
    for split, pids in split_ids.items():
        if not pids:
            notes.append(f"no evaluated problem is a {split} problem (eval.data vs data.train)")
            continue
        rows = {
            (m.label, e.name): _method_rows(members[m.label], records, e, pids)
            for m in methods
            for e in ESTIMATORS
        }
        for a, b in combinations(methods, 2):
            for e in ESTIMATORS:
                ra, rb = rows[a.label, e.name], rows[b.label, e.name]
                options = {"resamples": resamples, "confidence": confidence, "seed": seed}
                cmp.results.append(_pair(split, a.label, b.label, named_for(e, k), e, ra, rb, **options))
    return cmp


TYPED = {
    "train.seed": int, "eval.tests": int, "data.limit": int, "train.method": str, "eval.data": str,
    "data.train": str,
}  # fmt: skip
"""The settings the comparison computes with (the rest it only compares for equality), by type."""


def input_files(run_dirs: Sequence[Path]) -> list[tuple[Path, Path]]:
    """``(run directory, file)`` for every file :func:`compare_methods` may read of the runs: each
    ``config.yaml``, ``eval.jsonl`` and per-problem results file, and the training problems'
    file its ``data.train`` names; what an output written beside them must not be."""
    from codea1.data.sources import spec_file

    out: list[tuple[Path, Path]] = []
    for run_dir in map(Path, run_dirs):
        out += [(run_dir, run_dir / name) for name in (CONFIG_FILE, EVAL_FILE)]
        if (run_dir / EVAL_DIR).is_dir():
            out += [(run_dir, p) for p in sorted((run_dir / EVAL_DIR).rglob("*")) if p.is_file()]
        try:
            raw = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue
        data_section = raw.get("data") if isinstance(raw, dict) else None
        train = data_section.get("train") if isinstance(data_section, dict) else None
        if isinstance(train, str) and (data := spec_file(train)) is not None:
            out.append((run_dir, data))
    return out


def _same_directory(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        sa, sb = a.stat(), b.stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _check_distinct(paths: Sequence[Path]) -> None:
    """Each run once: the same directory twice (another spelling, a symlink) would pair a run with
    itself, or count it as two seeds of its method."""
    for i, p in enumerate(paths):
        for q in paths[:i]:
            if _same_directory(p, q):
                raise ReportError(f"run directory {p} is given twice (as {q}): give each run once")


def _load(path: Path, name: str) -> _Run:
    if not path.is_dir():
        raise ReportError(f"{path}: not a run directory")
    config_path = path / "config.yaml"
    if not config_path.is_file():
        raise ReportError(f"{path}: no config.yaml (not a training run directory)")
    try:
        raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ReportError(f"{config_path}: not readable YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ReportError(f"{config_path}: not a mapping")
    config = {**_flat(RunConfig().to_dict()), **_flat(raw)}
    for key, kind in TYPED.items():
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            expected = "an integer" if kind is int else "a string"
            raise ReportError(f"{config_path}: {key} is {value!r}, not {expected} (damaged or hand-edited?)")
    if not config.get("eval.data"):
        raise ReportError(
            f"{path}: evaluates nothing during training (eval.data is empty in its config.yaml)"
        )
    try:
        steps = sorted(read_eval_points(path))
    except OSError as e:
        raise ReportError(f"{path}: eval.jsonl is unreadable ({e})") from None
    if not steps:
        raise ReportError(f"{path}: no evaluation point yet (eval.jsonl is missing or empty)")
    return _Run(name, path, config, steps)


def _flat(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, name + "."))
        else:
            out[name] = json.dumps(value) if isinstance(value, list) else value
    return out


def _matches(key: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def _check_same(runs: list[_Run], keys: Sequence[str]) -> None:
    first = runs[0]
    for key in keys:
        for run in runs[1:]:
            if run.config.get(key) != first.config.get(key):
                raise ReportError(
                    f"the runs were not evaluated alike: {key} is {first.config.get(key)!r} in {first.name} "
                    f"but {run.config.get(key)!r} in {run.name} (compare runs with the same {key})"
                )


def _step(runs: list[_Run], step: int | None, notes: list[str]) -> int:
    common = set(runs[0].steps).intersection(*(r.steps for r in runs[1:]))
    if step is not None:
        lacking = [r.name for r in runs if step not in r.steps]
        if lacking:
            raise ReportError(f"--step {step}: {lacking[0]} has no evaluation point at step {step}")
        return step
    if not common:
        raise ReportError("the runs share no evaluation step (compare runs evaluated at the same steps)")
    at = max(common)
    ahead = [f"{r.name} (step {r.steps[-1]})" for r in runs if r.steps[-1] > at]
    if ahead:
        notes.append(f"compared at step {at}, the last point every run has; later points: {', '.join(ahead)}")
    return at


def _methods(runs: list[_Run], notes: list[str]) -> tuple[list[Method], dict[str, list[_Run]]]:
    """Group runs by their method settings; label each group (method name plus what tells it apart)."""
    method_keys = sorted({k for r in runs for k in r.config if _matches(k, METHOD_KEYS)})
    groups: dict[tuple[Any, ...], list[_Run]] = {}
    for run in runs:
        groups.setdefault(tuple(run.config.get(k) for k in method_keys), []).append(run)
    labels: dict[tuple[Any, ...], str] = {}
    for key, _ in groups.items():
        name = key[method_keys.index("train.method")]
        same_name = [other for other in groups if other[method_keys.index("train.method")] == name]
        varying = [
            i for i, k in enumerate(method_keys) if k != "train.method" and len({g[i] for g in same_name}) > 1
        ]
        labels[key] = str(name) + "".join(f" {method_keys[i]}={key[i]}" for i in varying)
    methods = [Method(labels[key], tuple(r.name for r in rs), tuple(int(r.config["train.seed"]) for r in rs))
               for key, rs in groups.items()]  # fmt: skip
    for method, rs in zip(methods, groups.values(), strict=True):
        if len(set(method.seeds)) < len(method.seeds):
            notes.append(f"{method.label}: several runs share a train.seed ({', '.join(method.runs)})")
        _note_differences(f"the runs of {method.label}", rs, method_keys, notes)
    _note_differences("the methods", [rs[0] for rs in groups.values()], method_keys, notes)
    return methods, {labels[key]: rs for key, rs in groups.items()}


def _note_differences(who: str, runs: list[_Run], method_keys: list[str], notes: list[str]) -> None:
    keys = sorted({k for r in runs for k in r.config})
    differ = [
        k for k in keys
        if k not in method_keys and not _matches(k, INCIDENTAL) and len({str(r.config.get(k)) for r in runs}) > 1
    ]  # fmt: skip
    if differ:
        shown = ", ".join(differ[:6]) + (f" and {len(differ) - 6} more" if len(differ) > 6 else "")
        notes.append(f"{who} also differ in {shown}: the comparison is not of the method alone")


def _records(run: _Run, step: int) -> dict[str, dict[str, dict[str, Any]]]:
    """task -> problem id -> record of one evaluation point (``tests`` absent when not evaluated)."""
    directory = run.path / "eval" / step_file_name(step)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for task in ("code", "tests"):
        files = sorted(directory.glob(f"{task}-*.jsonl")) if directory.is_dir() else []
        if not files:
            continue
        try:
            rows = read_records(files[-1])
        except (OSError, ValueError) as e:
            raise ReportError(f"{run.name}: step {step}'s {task} results are unreadable ({e})") from None
        out[task] = {str(r.get("id")): r for r in rows}
    if "code" not in out:
        raise ReportError(f"{run.name}: no per-problem results in {directory} (code-*.jsonl)")
    return out


def _problem_ids(records: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    names = list(records)
    ids = set(records[names[0]]["code"])
    for name in names[1:]:
        other = set(records[name]["code"])
        if other != ids:
            example = sorted(ids ^ other)[0]
            raise ReportError(
                f"{name} and {names[0]} evaluated different problems at this step (e.g. {example})"
            )
    return sorted(ids)


def _training_ids(run: _Run) -> set[str]:
    from codea1.data.problems import DataError, load_problems

    spec, limit = run.config["data.train"], int(run.config.get("data.limit") or 0)
    try:
        return {p.id for p in load_problems(spec, limit=limit)}
    except (DataError, OSError, ValueError) as e:
        raise ReportError(f"data.train={spec!r} (to tell training from held-out problems): {e}") from None


def _method_rows(
    runs: list[_Run],
    records: Mapping[str, Mapping[str, Mapping[str, Any]]],
    estimator: Estimator,
    pids: list[str],
) -> np.ndarray | None:
    """The method's ``(problems, features)`` rows, averaged over its runs (seeds); None when its runs
    have no results of the estimator's task (golden has no tester)."""
    per_run = []
    for run in runs:
        task = records[run.name].get(estimator.task)
        if task is None:
            return None
        try:
            per_run.append(estimator.rows([task[p] for p in pids]))
        except (KeyError, ValueError) as e:
            raise ReportError(f"{run.name}: step results lack {estimator.name} ({e})") from None
    stacked = np.stack(per_run)
    finite = np.isfinite(stacked)
    count = finite.sum(axis=0)
    total = np.where(finite, stacked, 0.0).sum(axis=0)
    return np.divide(total, count, out=np.full(total.shape, np.nan), where=count > 0)


def _pair(
    split: str,
    a: str,
    b: str,
    metric: str,
    estimator: Estimator,
    rows_a: np.ndarray | None,
    rows_b: np.ndarray | None,
    **kwargs: Any,
) -> PairResult:
    """``A - B`` of one estimate on one split, or why it has none."""
    if rows_a is None or rows_b is None:
        missing = a if rows_a is None else b
        role = "coder" if estimator.task == "code" else "tester"
        return PairResult(split, a, b, metric, None, f"{missing} has no {role} evaluation")
    keep = ~(np.isnan(rows_a).all(axis=1) & np.isnan(rows_b).all(axis=1))  # e.g. no live mutants
    if not keep.any():
        return PairResult(split, a, b, metric, None, "no problem has a value")
    delta = paired_statistic(rows_b[keep], rows_a[keep], estimator.statistic, **kwargs)
    return PairResult(split, a, b, metric, delta)
