"""The resumable loop every ``eval`` verb shares.

load the benchmark (errata applied) → per-problem CPU budgets from the reference timings (cached,
every reference and harness validated on the way) → the results file of this run key → the problems
not done yet → only when some remain: the models, then the sandbox → chunk by chunk: check, store
→ every problem's record, in order. A verb supplies what differs: its run key and the function
that checks one chunk. Expected failures (a damaged cache, a results file of another run, problems
without a harness) raise :class:`EvalInputError` with a one-line message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codea1.cache import cache_dir
from codea1.config import SandboxConfig
from codea1.data.problems import dataset_hash, load_problems
from codea1.eval.budgets import (
    DEFAULT_FACTOR,
    DEFAULT_FLOOR_S,
    NO_HARNESS,
    TIMINGS_VERSION,
    check_budget,
    reference_failures,
    reference_timings,
    vacuous_harnesses,
)
from codea1.eval.code_eval import CodeInput, with_golden_harness
from codea1.eval.errata import apply_errata, errata_fingerprint
from codea1.eval.inputs import detect_samples_format, read_code_samples, read_test_suites
from codea1.eval.suite_eval import GridRunner
from codea1.results_file import ResultStore
from codea1.types import Problem, TestExtraction

Say = Callable[[str], None]
"""Where progress and warnings go (the CLI prints them to stderr)."""
Record = dict[str, Any]
CheckChunk = Callable[[list[Problem], GridRunner, Mapping[str, float]], list[Record]]
"""Checks one chunk of problems in the sandbox under their budgets; one record per problem."""


class EvalInputError(ValueError):
    """Evaluation inputs that cannot be used; the message is one line for the user."""


class ResultsFileError(EvalInputError):
    """The results file of this run exists but cannot be resumed (another run key, or damaged)."""


@dataclass(frozen=True)
class RunOptions:
    """Where results and timings go, and how the sandbox checks."""

    results_dir: Path
    cache_dir: Path | None = None
    """Reference timings cache; ``None`` = ``<cache root>/eval`` (see ``codea1.cache``)."""
    workers: int = 0
    memory_mb: int = 4096
    chunk: int = 16
    budget_floor: float = DEFAULT_FLOOR_S
    budget_factor: float = DEFAULT_FACTOR


def _silent(msg: str) -> None:
    del msg


def load_benchmark(spec: str, limit: int = 0, say: Say = _silent) -> list[Problem]:
    """The problems of ``spec`` (the first ``limit``), golden harnesses built, the errata applied and reported."""
    try:
        problems = load_problems(spec, limit=limit)
    except ValueError as e:
        raise EvalInputError(str(e)) from None
    problems, reports = apply_errata([with_golden_harness(p) for p in problems])
    for r in reports:
        say(f"errata: {r.problem_id}: {r.outcome}")
    return problems


def require_harness(problems: Sequence[Problem], why: str) -> None:
    """Refuse problems without a harness (``harness`` column, or ``golden_tests`` to build one from)."""
    missing = [p.id for p in problems if not p.harness]
    if missing:
        raise EvalInputError(
            f"{len(missing)} of {len(problems)} problems have no harness to check candidates against "
            f"({why}; e.g. {missing[0]}): the problem file needs a 'harness' column (def check(candidate)) "
            "or a 'golden_tests' column"
        )


def restrict(
    problems: Sequence[Problem],
    given: Mapping[str, Any],
    unknown: Sequence[str],
    what: str,
    say: Say = _silent,
) -> list[Problem]:
    """The problems an input file (``what``: samples, tests) has entries for; the rest are reported."""
    if unknown:
        say(f"warning: {len(unknown)} {what} ids match no loaded problem (e.g. {unknown[0]}); ignored")
    kept = [p for p in problems if p.id in given]
    if not kept:
        raise EvalInputError(f"the {what} file has no entries for the loaded problems")
    if len(kept) < len(problems):
        say(f"warning: {len(problems) - len(kept)} problems have no {what}; evaluating {len(kept)}")
    return kept


def read_samples(
    path: Path, problems: Sequence[Problem], samples_format: str, say: Say = _silent
) -> tuple[dict[str, list[CodeInput]], list[str], str]:
    """Code samples of ``path`` in ``samples_format``, the ids matching no problem, and the format
    read (``auto`` resolved and said); a file that does not fit its format is an :class:`EvalInputError`."""
    try:
        fmt = detect_samples_format(path) if samples_format == "auto" else samples_format
        given, unknown = read_code_samples(path, problems, fmt)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise EvalInputError(str(e)) from None
    if samples_format == "auto":
        say(f"samples format: {fmt} (detected; --samples-format to choose)")
    return given, unknown, fmt


def read_suites(path: Path, problems: Sequence[Problem]) -> tuple[dict[str, list[TestExtraction]], list[str]]:
    """Test suites of ``path`` and the ids matching no problem; a bad line is an :class:`EvalInputError`."""
    try:
        return read_test_suites(path, problems)
    except ValueError as e:
        raise EvalInputError(str(e)) from None


@dataclass
class Given:
    """Inputs read from files instead of sampled: code samples and test suites per problem id."""

    codes: dict[str, list[CodeInput]] = field(default_factory=dict)
    suites: dict[str, list[TestExtraction]] = field(default_factory=dict)
    samples_format: str = ""
    """The format the samples file was read in (``auto`` resolved)."""


def given_inputs(
    problems: Sequence[Problem],
    *,
    samples: Path | None = None,
    tests: Path | None = None,
    samples_format: str = "auto",
    say: Say = _silent,
) -> tuple[list[Problem], Given]:
    """Read the samples and the tests files given, keeping only the problems each has entries for."""
    given = Given()
    if samples is not None:
        given.codes, unknown, given.samples_format = read_samples(samples, problems, samples_format, say)
        problems = restrict(problems, given.codes, unknown, "samples", say)
    if tests is not None:
        given.suites, unknown = read_suites(tests, problems)
        problems = restrict(problems, given.suites, unknown, "tests", say)
    return list(problems), given


def file_id(path: Path) -> str:
    """The model id of an input file in a run key: its name and the head of its sha256."""
    return f"file:{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


def reference_budgets(
    problems: Sequence[Problem], options: RunOptions, say: Say = _silent
) -> tuple[dict[str, float], str]:
    """Per-problem CPU budgets from the (cached) reference timings, and the dataset hash.

    Every reference is validated against its own harness on the way; references that fail it and
    harnesses that cannot fail (a sentinel candidate passed) are reported as warnings.
    """
    digest = dataset_hash(problems)
    name = f"{digest[:16]}-{errata_fingerprint()}-v{TIMINGS_VERSION}.json"
    cache = (options.cache_dir or cache_dir("eval")) / "reference_times" / name
    note = "" if cache.exists() else " (first run on this dataset: measuring every reference once)"
    say(f"reference timings: {cache}{note}")
    try:
        timings = reference_timings(problems, cache, workers=options.workers)
    except (ValueError, TypeError) as e:  # a damaged cache file
        raise EvalInputError(f"reference timings cache {cache}: {e}; delete it to measure again") from None
    failures = reference_failures(timings)
    for pid, err in sorted(failures.items()):
        if err != NO_HARNESS:
            say(f"warning: reference of {pid} fails its own harness: {err}")
    if bare := sorted(pid for pid, err in failures.items() if err == NO_HARNESS):
        say(f"{len(bare)} problems have no harness (e.g. {bare[0]}): their check budget is the floor")
    for pid, passed in sorted(vacuous_harnesses(timings).items()):
        say(f"warning: the harness of {pid} cannot fail (passed sentinel candidates: {passed})")
    budgets = {
        pid: check_budget(t.cpu_s, options.budget_floor, options.budget_factor) for pid, t in timings.items()
    }
    return budgets, digest


def _sandbox(options: RunOptions) -> Any:
    from codea1.sandbox.local import Sandbox  # imported when needed: it brings the worker machinery

    return Sandbox(SandboxConfig(workers=options.workers, memory_mb=options.memory_mb))


def run_resumable(
    problems: Sequence[Problem],
    task: str,
    model: str,
    settings: Mapping[str, Any],
    options: RunOptions,
    prepare: Callable[[], CheckChunk],
    say: Say = _silent,
) -> tuple[list[Record], Path]:
    """Check every problem not yet in the results file, chunk by chunk; every record and the file.

    The run key is ``{"model": model, "dataset": <hash>, **settings}``; ``task`` prefixes the file
    name. ``prepare`` (which loads the models) runs only when some problem remains, before the
    sandbox starts; each chunk's records are stored as soon as they are checked.
    """
    budgets, digest = reference_budgets(problems, options, say)
    try:
        store = ResultStore(options.results_dir, task, {"model": model, "dataset": digest, **settings})
    except ValueError as e:
        raise ResultsFileError(str(e)) from None
    todo = [p for p in problems if not store.done(p.id)]
    say(f"{len(problems) - len(todo)} problems already done in {store.path}; {len(todo)} to go")
    if todo:
        check = prepare()
        sandbox = _sandbox(options)
        try:
            size = max(1, options.chunk)
            for start in range(0, len(todo), size):
                store.add(check(todo[start : start + size], sandbox, budgets))
                say(f"checked {sum(store.done(p.id) for p in problems)}/{len(problems)} problems")
        finally:
            sandbox.close()
    return [store.records[p.id] for p in problems], store.path
