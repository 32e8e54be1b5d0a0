"""From raw model text to rewards: parsing, one execution grid per problem, rewards, Mistake-Book update.

Used by ``codea1 score`` and by the trainer. For each problem: extract the code of every Code-LLM
response (the problem's imports prepended), extract the tests of every suite, build ONE
:class:`~codea1.types.GridJob` with every distinct test (generated + replayed history) against every
extracted code, run all problems in one ``run_grids`` call, then compute R_C per code and R_T per
suite with :func:`codea1.core.rewards.rewards` (its options, reward terms included, from the
``reward:`` section by :func:`codea1.core.reward_terms.reward_options`). With the mutation term on
(``reward.mutation_weight`` > 0) the problem's live training mutants (:mod:`codea1.training_mutants`)
are extra rows of the same grid, and each suite's input to the term is which of them its tests
kill (the mutation-kinds term, ``reward.mutation_kinds_weight``, reads the same input with each live
mutant's fault kind). A problem that cannot be scored (sandbox failure,
malformed grid, empty reference) gets zero rewards and a recorded ``error``; nothing here raises for
one bad problem. Numbered choices are explained in docs/algorithm.md.

One score type per method family: :class:`ProblemScore` (Code-A1 and self-play: R_C, R_T and the
Mistake-Book update) and :class:`GoldenScore` (the Golden-Tests baseline: R_C only); :data:`Score`
is either, and :class:`GridRunner` is what both need from the sandbox.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeAlias

from codea1.config import LossConfig, RewardConfig
from codea1.core.losses import policy_loss
from codea1.core.reward_terms import (
    MUTANT_TERMS,
    TERMS,
    GoldenPasses,
    MutantKills,
    reward_options,
    term_weights,
)
from codea1.core.rewards import CodeOutcome, CodeRewards, SuiteOutcome, rewards
from codea1.data.parsing import extract_code, extract_tests
from codea1.replay.mistake_book import MistakeHit, MistakeUpdate
from codea1.sandbox.grid import refused_by_scope
from codea1.sandbox.test_names import problem_job
from codea1.training_mutants import LiveMutants, MutantPool
from codea1.types import CodeExtraction, ExecGrid, GridJob, Problem, TestCase, TestExtraction, Verdict

COUNTED_REJECT_REASONS = frozenset({"syntax", "operator", "not_call", "no_entry_point", "duplicate"})
"""Parser rejections that count against validity (inv_k). ``not_assert`` (a statement that is not an
assert, e.g. a setup assignment) is reported in the breakdown but not penalised, as in the reference."""


class GridRunner(Protocol):
    """What scoring needs from the sandbox (``codea1.sandbox.local.Sandbox`` and
    ``codea1.sandbox.cluster.ClusterSandbox`` satisfy it)."""

    def run_grids(self, jobs: Sequence[GridJob], *, rel_tol: float, abs_tol: float) -> list[ExecGrid]:
        """Execute every job; one :class:`ExecGrid` per job, same order."""
        ...


@dataclass(frozen=True)
class ScoringItem:
    """One problem with its code responses and, per code, the raw Test-LLM responses (n_t suites)."""

    problem: Problem
    code_texts: tuple[str, ...]
    suite_texts: tuple[tuple[str, ...], ...]
    code_extractions: tuple[CodeExtraction, ...] | None = None
    """The code ``extract_code`` found in each of ``code_texts``, when the caller already has it
    (the trainer extracts once per step); None: scoring extracts it."""

    def extracted_codes(self) -> tuple[CodeExtraction, ...]:
        """The code of every response: ``code_extractions``, or extracted now."""
        if self.code_extractions is not None:
            if len(self.code_extractions) != len(self.code_texts):
                raise ValueError(
                    f"{len(self.code_extractions)} code extractions for {len(self.code_texts)} code texts"
                )
            return self.code_extractions
        return tuple(extract_code(t, self.problem.entry_point) for t in self.code_texts)


@dataclass(frozen=True)
class ProblemScore:
    """Rewards of one problem under Code-A1 or self-play, and everything needed to explain them."""

    problem_id: str
    code_rewards: tuple[float, ...]
    suite_rewards: tuple[tuple[float, ...], ...]
    breakdowns: tuple[CodeRewards, ...]
    code_extractions: tuple[CodeExtraction, ...]
    test_extractions: tuple[tuple[TestExtraction, ...], ...]
    tests: tuple[TestCase, ...]
    """Columns of the grid: generated tests first (order of appearance), then history-only tests."""
    history_columns: tuple[int, ...]
    """Grid column of each replayed history test (in retrieval order)."""
    grid: ExecGrid | None
    mistakes: MistakeUpdate
    ignored: tuple[tuple[dict[str, int], ...], ...] = ()
    """Per code and suite: asserts that count neither for nor against validity, by reason
    (``not_assert`` rejections, ``uncomparable`` oracle values)."""
    error: str = ""
    term_stats: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per reward term that needed data of its own, the problem's counts (the mutation term: mutants
    generated, equivalent, dropped, live, their verdicts and the filter's seconds)."""

    def to_dict(self) -> dict[str, Any]:
        """The output line of ``codea1 score``."""
        codes = []
        for c, b in enumerate(self.breakdowns):
            d = b.to_dict()
            d["extraction"] = "ok" if self.code_extractions[c].ok else self.code_extractions[c].reason
            for k, s in enumerate(d["suites"]):
                s["ignored"] = self.ignored[c][k] if self.ignored else {}
            codes.append(d)
        oracle = self.grid.oracle if self.grid is not None else ()
        return {
            "id": self.problem_id,
            "code_rewards": list(self.code_rewards),
            "suite_rewards": [list(r) for r in self.suite_rewards],
            "breakdown": {
                "codes": codes,
                "tests": [
                    {
                        **t.to_dict(),
                        "oracle": oracle[i].status if i < len(oracle) else None,
                        **(
                            {"oracle_reason": oracle[i].reason}
                            if i < len(oracle) and oracle[i].reason
                            else {}
                        ),
                    }
                    for i, t in enumerate(self.tests)
                ],
                "history_columns": list(self.history_columns),
                "mistakes": self.mistakes.to_dict(),
                **({"terms": self.term_stats} if self.term_stats else {}),
            },
            **({"error": self.error} if self.error else {}),
        }


@dataclass
class _Prepared:
    """One item after parsing: the job to run and how its columns map back."""

    item: ScoringItem
    codes: tuple[CodeExtraction, ...]
    suites: tuple[tuple[TestExtraction, ...], ...]
    run_index: dict[int, int]
    """code index → row of the grid (codes that failed extraction are not run)."""
    tests: list[TestCase] = field(default_factory=list)
    column: dict[TestCase, int] = field(default_factory=dict)
    history_columns: tuple[int, ...] = ()
    job: GridJob | None = None
    error: str = ""
    mutants: LiveMutants | None = None
    """The live training mutants, the grid's last rows (None: the mutation term is off)."""

    def add_test(self, test: TestCase) -> int:
        if test not in self.column:
            self.column[test] = len(self.tests)
            self.tests.append(test)
        return self.column[test]


def bind_policy_loss(loss: LossConfig) -> functools.partial:
    """The engine's ``LossFn``: :func:`codea1.core.losses.policy_loss` with this config's settings."""
    return functools.partial(
        policy_loss,
        clip_low=loss.clip_low,
        clip_high=loss.clip_high,
        dual_clip=loss.dual_clip,
        aggregation=loss.aggregation,
        kl_coef=loss.kl_coef,
        entropy_coef=loss.entropy_coef,
    )


def _program(problem: Problem, code: str) -> str:
    return f"{problem.imports.rstrip()}\n{code}" if problem.imports.strip() else code


def _prepare(item: ScoringItem, history: Sequence[TestCase]) -> _Prepared:
    p = item.problem
    codes = item.extracted_codes()
    suites = tuple(tuple(extract_tests(t, p.entry_point) for t in row) for row in item.suite_texts)
    run_index = {c: i for i, c in enumerate([c for c, e in enumerate(codes) if e.ok])}
    prep = _Prepared(item, codes, suites, run_index)
    if len(item.suite_texts) != len(item.code_texts):
        prep.error = f"{len(item.suite_texts)} suite lists for {len(item.code_texts)} codes"
        return prep
    if not p.reference.strip():
        prep.error = "empty reference solution"
        return prep
    for row in suites:
        for ext in row:
            for t in ext.tests:
                prep.add_test(t)
    prep.history_columns = tuple(prep.add_test(t) for t in history)
    programs = tuple(_program(p, codes[c].code or "") for c in run_index)
    if programs:
        prep.job = problem_job(p, programs, prep.tests)
    return prep


def _run_all(
    runner: GridRunner, preps: list[_Prepared], rel_tol: float, abs_tol: float
) -> dict[int, ExecGrid]:
    """Run every job in one call; if that call fails, run them one by one to isolate the culprit."""
    todo = [i for i, pr in enumerate(preps) if pr.job is not None and not pr.error]
    jobs = [preps[i].job for i in todo]
    try:
        grids = runner.run_grids(jobs, rel_tol=rel_tol, abs_tol=abs_tol) if jobs else []
        if len(grids) != len(jobs):
            raise RuntimeError(f"sandbox returned {len(grids)} grids for {len(jobs)} jobs")
        out = dict(zip(todo, grids, strict=True))
    except Exception:  # isolate: one bad problem must not zero the whole batch
        out = {}
        for i in todo:
            try:
                out[i] = runner.run_grids([preps[i].job], rel_tol=rel_tol, abs_tol=abs_tol)[0]
            except Exception as e:  # noqa: BLE001 - recorded as the problem's error
                preps[i].error = f"sandbox: {type(e).__name__}: {e}"
    for i, grid in out.items():
        job = preps[i].job
        shape_ok = (
            len(grid.oracle) == len(job.tests)
            and len(grid.code_status) == len(job.codes)
            and len(grid.verdicts) == len(job.codes)
            and all(len(row) == len(job.tests) for row in grid.verdicts)
        )
        if not shape_ok:
            preps[i].error = "sandbox returned a grid whose shape does not match its job"
    return {i: g for i, g in out.items() if not preps[i].error}


def _add_mutants(preps: list[_Prepared], pool: MutantPool, runner: GridRunner, reward: RewardConfig) -> None:
    """Append each scorable problem's live training mutants to its job (one filter call for the
    problems the pool has not seen)."""
    todo = [pr for pr in preps if pr.job is not None and not pr.error]
    live = pool.live([pr.item.problem for pr in todo], runner, rel_tol=reward.float_rel_tol,
                     abs_tol=reward.float_abs_tol)  # fmt: skip
    for pr, mutants in zip(todo, live, strict=True):
        assert pr.job is not None
        pr.mutants = mutants
        pr.job = replace(pr.job, codes=pr.job.codes + mutants.programs)


MutantRow: TypeAlias = tuple[Verdict, ...]
"""One live mutant's verdicts on the grid's tests."""


def _split(
    prep: _Prepared, grid: ExecGrid | None
) -> tuple[ExecGrid | None, list[MutantRow] | None, tuple[str, ...]]:
    """The grid of the codes alone, the rows of the mutants that loaded (None: the terms are off) and
    the fault kinds of those mutants (empty when not known)."""
    if prep.mutants is None or grid is None:
        return grid, None if prep.mutants is None else [], ()
    n = len(grid.code_status) - len(prep.mutants.programs)
    loaded = [r for r in range(n, len(grid.code_status)) if grid.code_status[r].passed]
    rows = [grid.verdicts[r] for r in loaded]
    known = len(prep.mutants.kinds) == len(prep.mutants.programs)
    kinds = tuple(prep.mutants.kinds[r - n] for r in loaded) if known else ()
    return replace(grid, code_status=grid.code_status[:n], verdicts=grid.verdicts[:n]), rows, kinds


def _mutant_kills(
    oracle: Sequence[Any], cols: Sequence[int], rows: Sequence[MutantRow], kinds: tuple[str, ...] = ()
) -> MutantKills:
    """Which live mutants each test of V_k kills (any verdict but ``pass``); a test whose oracle is not
    ``valid`` (a wrong prediction) kills none. ``kinds``: each row's fault kind."""
    return MutantKills(
        len(rows),
        tuple(
            frozenset(m for m, row in enumerate(rows) if not row[col].passed)
            if oracle[col].status == "valid"
            else frozenset()
            for col in cols
        ),
        kinds,
    )


def _outcomes(
    prep: _Prepared,
    grid: ExecGrid | None,
    mutant_rows: Sequence[MutantRow] | None = None,
    mutant_kinds: tuple[str, ...] = (),
) -> tuple[list[CodeOutcome], list[tuple[dict[str, int], ...]]]:
    """The pure reward inputs of each code (V_k, inv_k, history results, the mutation terms' kills when
    ``mutant_rows`` is given, with ``mutant_kinds``) and the ignored rejections."""
    oracle = grid.oracle if grid is not None else ()
    usable_hist = [col for col in prep.history_columns if col < len(oracle) and oracle[col].usable]
    outcomes, ignored = [], []
    for c in range(len(prep.codes)):
        row = prep.run_index.get(c)
        valid = grid is not None and row is not None and grid.code_status[row].passed
        verdicts = grid.verdicts[row] if valid else ()
        suites, ign = [], []
        for s in prep.suites[c]:
            invalid: Counter[str] = Counter()
            skipped: Counter[str] = Counter()
            for r in s.rejected:
                (invalid if r.reason in COUNTED_REJECT_REASONS else skipped)[r.reason] += 1
            seen: set[str] = set()
            cols, wrong = [], 0
            for t in s.tests:
                if t.call in seen:
                    invalid["duplicate"] += 1
                    continue
                seen.add(t.call)
                col = prep.column[t]
                if col < len(oracle) and oracle[col].status == "uncomparable":
                    skipped["uncomparable"] += 1  # no inspectable value: neither pass nor bug
                    continue
                if col >= len(oracle) or not oracle[col].usable:
                    invalid["oracle_invalid"] += 1
                    continue
                cols.append(col)
                wrong += oracle[col].status == "wrong_prediction"
            passes = tuple(bool(valid and verdicts[col].passed) for col in cols)
            kills = None if mutant_rows is None else _mutant_kills(oracle, cols, mutant_rows, mutant_kinds)
            terms = {} if kills is None else dict.fromkeys(MUTANT_TERMS, kills)
            suites.append(SuiteOutcome(passes, wrong, dict(invalid), s.nonprintable_ratio, terms))
            ign.append(dict(skipped))
        hist = tuple(bool(valid and verdicts[col].passed) for col in usable_hist)
        outcomes.append(CodeOutcome(bool(valid), hist, tuple(suites)))
        ignored.append(tuple(ign))
    return outcomes, ignored


def _mistake_update(prep: _Prepared, grid: ExecGrid | None, outcomes: list[CodeOutcome]) -> MistakeUpdate:
    """Generated tests failed by valid codes (own suites), history tests passed by valid codes; with
    counts; and history tests the grid refused as not judging behaviour (removed from the book)."""
    pid = prep.item.problem.id
    if grid is None:
        return MistakeUpdate(pid)
    failed: Counter[TestCase] = Counter()
    passed: Counter[TestCase] = Counter()
    for c, out in enumerate(outcomes):
        if not out.valid:
            continue
        verdicts = grid.verdicts[prep.run_index[c]]
        for s in prep.suites[c]:
            seen: set[str] = set()
            for t in s.tests:
                col = prep.column[t]
                if t.call in seen or not grid.oracle[col].usable:
                    continue
                seen.add(t.call)
                if not verdicts[col].passed:
                    failed[t] += 1
        for col in prep.history_columns:
            if grid.oracle[col].usable and verdicts[col].passed:
                passed[prep.tests[col]] += 1
    return MistakeUpdate(
        pid,
        failed=tuple(MistakeHit(t, n, grid.oracle[prep.column[t]].status) for t, n in failed.items()),
        passed=tuple(MistakeHit(t, n, grid.oracle[prep.column[t]].status) for t, n in passed.items()),
        rejected=tuple(prep.tests[col] for col in prep.history_columns if refused_by_scope(grid.oracle[col])),
    )


def _zero_score(prep: _Prepared, grid: ExecGrid | None = None) -> ProblemScore:
    n_suites = [len(row) for row in prep.item.suite_texts]
    n_codes = len(prep.codes)
    outcomes = [
        CodeOutcome(
            False, (), tuple(SuiteOutcome(()) for _ in range(n_suites[c] if c < len(n_suites) else 0))
        )
        for c in range(n_codes)
    ]
    zero = rewards(outcomes, nonprintable_penalty=False)
    return ProblemScore(
        prep.item.problem.id,
        tuple(0.0 for _ in range(n_codes)),
        tuple(tuple(0.0 for _ in z.suites) for z in zero),
        tuple(zero),
        prep.codes,
        prep.suites,
        tuple(prep.tests),
        prep.history_columns,
        grid,
        MistakeUpdate(prep.item.problem.id),
        error=prep.error,
    )


def score_batch(
    items: Sequence[ScoringItem],
    sandbox: GridRunner,
    *,
    reward: RewardConfig,
    history: Mapping[str, Sequence[TestCase]] | None = None,
    mutants: MutantPool | None = None,
) -> list[ProblemScore]:
    """Rewards for every problem of a batch (one sandbox call in the normal case), in input order.

    With the mutation term on, ``mutants`` keeps each problem's training mutants between calls (the
    trainer holds one for the run); None: a pool for this call only.
    """
    history = history or {}
    preps = [_prepare(it, history.get(it.problem.id, ())) for it in items]
    weights = term_weights(reward)
    mutant_terms = [name for name in MUTANT_TERMS if weights[name] > 0]
    if mutant_terms:
        pool = mutants if mutants is not None else MutantPool(reward.mutation_mutants, reward.mutation_seed)
        _add_mutants(preps, pool, sandbox, reward)
    grids = _run_all(sandbox, preps, reward.float_rel_tol, reward.float_abs_tol)
    scores = []
    for i, prep in enumerate(preps):
        if prep.error:
            scores.append(_zero_score(prep))
            continue
        grid, mutant_rows, mutant_kinds = _split(prep, grids.get(i))
        outcomes, ignored = _outcomes(prep, grid, mutant_rows, mutant_kinds)
        result = rewards(outcomes, **reward_options(reward))
        term_stats = {}
        if prep.mutants is not None:
            ran = sum(v.status != "invalid" for row in mutant_rows or () for v in row)
            stats = prep.mutants.stats() | {"verdicts": float(ran)}
            kinds = {"kinds": float(len(set(mutant_kinds)))}
            for name in mutant_terms:  # the mutation-kinds term also counts the problem's kinds
                term_stats[name] = stats if name == "mutation" else stats | kinds
        scores.append(
            ProblemScore(
                problem_id=prep.item.problem.id,
                code_rewards=tuple(r.reward for r in result),
                suite_rewards=tuple(r.suite_rewards for r in result),
                breakdowns=tuple(result),
                code_extractions=prep.codes,
                test_extractions=prep.suites,
                tests=tuple(prep.tests),
                history_columns=prep.history_columns,
                grid=grid,
                mistakes=_mistake_update(prep, grid, outcomes),
                ignored=tuple(ignored),
                term_stats=term_stats,
            )
        )
    return scores


@dataclass(frozen=True)
class GoldenScore:
    """Golden-Tests baseline: each code's pass rate on the problem's own golden tests."""

    problem_id: str
    code_rewards: tuple[float, ...]
    passed: tuple[int, ...]
    total: int
    """Golden tests whose oracle is usable (the denominator)."""
    rejected: int
    """Golden asserts that could not be parsed into a test (not counted)."""
    code_valid: tuple[bool, ...]
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}
        d["id"] = d.pop("problem_id")
        return d


Score: TypeAlias = ProblemScore | GoldenScore
"""One problem's score under any method (:func:`score_batch` or :func:`score_golden`)."""


def score_golden(
    items: Sequence[ScoringItem], sandbox: GridRunner, *, reward: RewardConfig | None = None
) -> list[GoldenScore]:
    """R = passed / total on the golden tests (parsed with ``extract_tests``), 0 for invalid code (the
    ``golden`` term of :mod:`codea1.core.reward_terms`).

    The candidate is compared with the reference's oracle value, which equals the golden expected
    value whenever the golden test is correct; suites written by the Test LLM are ignored.
    """
    reward = reward or RewardConfig()
    preps, rejected = [], []
    for it in items:
        p = it.problem
        prep = _prepare(replace(it, suite_texts=tuple(() for _ in it.code_texts)), ())
        n_rej = 0
        for snippet in p.golden_tests:
            ext = extract_tests(snippet, p.entry_point)
            n_rej += len(ext.rejected)
            for t in ext.tests:
                prep.add_test(t)
        if prep.job is not None:
            prep.job = problem_job(p, prep.job.codes, prep.tests)
        if not prep.error and not p.golden_tests:
            prep.error = "problem has no golden tests"
        preps.append(prep)
        rejected.append(n_rej)
    grids = _run_all(sandbox, preps, reward.float_rel_tol, reward.float_abs_tol)
    out = []
    for i, prep in enumerate(preps):
        n = len(prep.codes)
        grid = grids.get(i)
        if prep.error or grid is None:
            err = prep.error or ("no code could be extracted" if n else "")
            out.append(
                GoldenScore(
                    prep.item.problem.id,
                    (0.0,) * n,
                    (0,) * n,
                    len(prep.tests),
                    rejected[i],
                    (False,) * n,
                    err,
                )
            )
            continue
        usable = [col for col, o in enumerate(grid.oracle) if o.usable]
        passed, valid = [], []
        for c in range(n):
            row = prep.run_index.get(c)
            ok = row is not None and grid.code_status[row].passed
            valid.append(ok)
            passed.append(sum(grid.verdicts[row][col].passed for col in usable) if ok else 0)
        total = len(usable)
        golden = TERMS["golden"].compute
        out.append(
            GoldenScore(
                prep.item.problem.id,
                tuple(
                    golden(GoldenPasses(p, total, ok), 0).value for p, ok in zip(passed, valid, strict=True)
                ),
                tuple(passed),
                total,
                rejected[i],
                tuple(valid),
                "" if total else "no golden test has a usable oracle",
            )
        )
    return out
