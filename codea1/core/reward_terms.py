"""The reward terms beyond R_T's validity and adversarial parts, one table entry each (pure math, no I/O).

A term is a :class:`RewardTerm` in :data:`TERMS`: its name, the role it pays, the ``reward.*`` key
of its weight, and the function from its per-suite (or per-code) input to its value. Everything
else reads the table: both implementations of :mod:`codea1.core.rewards` add every tester term
with a weight above 0 to R_T (a term whose weight is 0 is not computed at all, so the paper's
rewards are unchanged bit for bit), :func:`reward_options` turns the ``reward:`` section into the
rewards' keyword arguments, ``codea1 score`` has a ``--<name>-weight`` flag per tester term, and
``step_metrics`` logs each term's :attr:`RewardTerm.metrics`. A new term is an entry here and its
weight field in :class:`~codea1.config.RewardConfig`; a term that needs data the grid does not
have yet also needs scoring to gather its input (docs/algorithm.md, item 24).

Entries:

* ``mutation`` (tester, ``reward.mutation_weight``; deviation D12): Mut_k, the share of the
  reference's live mutants that the suite's counted tests kill, each mutant counted once
  (:func:`mutation_term`).
* ``mutation_kinds`` (tester, ``reward.mutation_kinds_weight``; deviation D13): the share of the
  live mutants' fault kinds (:attr:`MutantKills.kinds`) of which the suite's counted tests kill at
  least one mutant, so killing one kind many times earns less than killing several kinds
  (:func:`mutation_kinds_term`).
* ``golden`` (coder, the whole R_C of the Golden-Tests baseline, no weight): passed / total on the
  problem's golden tests, 0 for code that does not load (:func:`golden_term`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from codea1.config import RewardConfig


@dataclass(frozen=True)
class TermValue:
    """A term's value for one suite (or code) and the counts that explain it."""

    value: float
    """The term before its weight, in [0, 1]."""
    detail: dict[str, float] = field(default_factory=dict)
    """Counts behind ``value`` (what ``codea1 score`` prints and the metrics average)."""


@dataclass(frozen=True)
class MutantKills:
    """What one suite's tests do to the reference's live mutants (the mutation term's input).

    ``kills[i]``: the live mutants (indices in ``range(live)``) that the i-th test of V_k kills,
    in V_k's order; empty for a test whose oracle is not ``valid`` (a wrong prediction kills
    nothing). ``live``: M, the mutants that are not equivalent on the golden tests. ``kinds``: the
    fault kind of each live mutant (``kinds[m]`` for mutant ``m``; the mutation operator's class,
    e.g. ``arithmetic``, ``comparison``), or empty when scoring did not gather them (only the
    ``mutation_kinds`` term reads them).
    """

    live: int
    kills: tuple[frozenset[int], ...]
    kinds: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kinds and len(self.kinds) != self.live:
            raise ValueError(f"{len(self.kinds)} mutant kinds for {self.live} live mutants")


@dataclass(frozen=True)
class GoldenPasses:
    """One code on its problem's golden tests (the golden term's input)."""

    passed: int
    total: int
    """Golden tests whose oracle is usable."""
    valid: bool
    """The code's definitions loaded."""


def mutation_credits(kills: MutantKills, counted: int) -> tuple[float, ...]:
    """What each of the first ``counted`` tests earns: the live mutants it kills that no earlier test
    of the suite killed, over M (a test that only kills killed mutants earns 0: the redundancy
    penalty). Their sum is :func:`mutation_term`'s value up to rounding."""
    seen: set[int] = set()
    out = []
    for k in kills.kills[:counted]:
        new = k - seen
        seen |= new
        out.append(len(new) / kills.live if kills.live else 0.0)
    return tuple(out)


def mutation_term(kills: MutantKills, counted: int) -> TermValue:
    """Mut_k = |killed| / M over the first ``counted`` tests of V_k (the tests Adv counts: D), where
    killed is the union of their kills; 0 when M = 0.

    Detail: ``live`` (M), ``killed``, ``redundant_kills`` (kills of a mutant an earlier test had
    killed), ``redundant_tests`` (tests that killed something, but nothing new).
    """
    seen: set[int] = set()
    redundant_kills = redundant_tests = 0
    for k in kills.kills[:counted]:
        new = k - seen
        redundant_kills += len(k) - len(new)
        redundant_tests += bool(k) and not new
        seen |= new
    value = len(seen) / kills.live if kills.live else 0.0
    detail = {"live": kills.live, "killed": len(seen), "redundant_kills": redundant_kills,
              "redundant_tests": redundant_tests}  # fmt: skip
    return TermValue(value, {k: float(v) for k, v in detail.items()})


def mutation_kinds_term(kills: MutantKills, counted: int) -> TermValue:
    """Kinds_k = |{kinds[m] : m killed}| / |{kinds[m] : m live}| over the first ``counted`` tests of
    V_k (the tests Adv counts), where killed is the union of their kills; 0 when there is no live
    mutant or no kind was gathered. A kind counts once however many of its mutants the suite kills.

    Detail: ``live_kinds``, ``killed_kinds``, ``killed`` (mutants), ``same_kind_kills`` (killed
    mutants beyond the first of each killed kind: what this term, unlike Mut_k, does not pay for).
    """
    if not kills.live or not kills.kinds:
        return TermValue(0.0, {"live_kinds": 0.0, "killed_kinds": 0.0, "killed": 0.0, "same_kind_kills": 0.0})
    killed = frozenset().union(*kills.kills[:counted]) if counted > 0 else frozenset()
    live_kinds = set(kills.kinds)
    killed_kinds = {kills.kinds[m] for m in killed}
    detail = {"live_kinds": len(live_kinds), "killed_kinds": len(killed_kinds), "killed": len(killed),
              "same_kind_kills": len(killed) - len(killed_kinds)}  # fmt: skip
    return TermValue(len(killed_kinds) / len(live_kinds), {k: float(v) for k, v in detail.items()})


def golden_term(passes: GoldenPasses, counted: int = 0) -> TermValue:
    """passed / total, 0 for code that does not load or without a usable golden test (``counted``
    is unused: every golden test counts)."""
    value = passes.passed / passes.total if passes.valid and passes.total else 0.0
    return TermValue(value, {"passed": float(passes.passed), "total": float(passes.total)})


def _mean(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if len(xs) else 0.0


def _total(rows: Sequence[Mapping[str, float]], key: str) -> float:
    return float(sum(r.get(key, 0.0) for r in rows))


def _pool_metrics(problems: Sequence[Mapping[str, float]]) -> dict:
    """The training mutants themselves (per problem: scoring's counts), whichever term paid for them."""
    generated = _total(problems, "generated")
    return {
        "tester/mutants_live_mean": _mean([p.get("live", 0.0) for p in problems]),
        "tester/mutants_equivalent_rate": _total(problems, "equivalent") / generated if generated else 0.0,
        "tester/mutation_problems_off": float(sum(1 for p in problems if not p.get("live"))),
        "exec/mutant_verdicts": _total(problems, "verdicts"),
        "exec/mutant_filter_seconds": _total(problems, "filter_seconds"),
    }


def _mutation_metrics(suites: Sequence[Mapping[str, float]], problems: Sequence[Mapping[str, float]]) -> dict:
    live = _total(suites, "live")
    return {
        "tester/mutation_reward_mean": _mean([s["reward"] for s in suites]),
        "tester/mutation_score_mean": _mean([s["value"] for s in suites if s.get("live")]),
        "tester/mutants_killed_rate": _total(suites, "killed") / live if live else 0.0,
        "tester/mutation_redundant_kills_mean": _mean([s.get("redundant_kills", 0.0) for s in suites]),
    } | _pool_metrics(problems)


def _mutation_kinds_metrics(
    suites: Sequence[Mapping[str, float]], problems: Sequence[Mapping[str, float]]
) -> dict:
    live_kinds = _total(suites, "live_kinds")
    return {
        "tester/mutation_kinds_reward_mean": _mean([s["reward"] for s in suites]),
        "tester/mutation_kinds_score_mean": _mean([s["value"] for s in suites if s.get("live_kinds")]),
        "tester/mutant_kinds_killed_rate": _total(suites, "killed_kinds") / live_kinds if live_kinds else 0.0,
        "tester/mutation_same_kind_kills_mean": _mean([s.get("same_kind_kills", 0.0) for s in suites]),
        "tester/mutant_kinds_live_mean": _mean([p.get("kinds", 0.0) for p in problems]),
    } | _pool_metrics(problems)


def _golden_metrics(codes: Sequence[Mapping[str, float]], problems: Sequence[Mapping[str, float]]) -> dict:
    return {"exec/golden_pass_rate": _mean([c["value"] for c in codes])}


@dataclass(frozen=True)
class RewardTerm:
    """One reward term: who it pays, where its weight is set, how it is computed and logged."""

    name: str
    role: Literal["tester", "coder"]
    weight: str | None
    """The ``reward:`` field holding its weight; None: the term is the whole reward of its method."""
    compute: Callable[[Any, int], TermValue]
    """(input, counted tests) -> value; the input is the term's entry in ``SuiteOutcome.terms``."""
    metrics: Callable[[Sequence[Mapping[str, float]], Sequence[Mapping[str, float]]], dict[str, float]]
    """(per suite: ``value``, ``reward`` and the detail; per problem: scoring's counts) -> metrics."""
    summary: str
    """One line for ``--help`` and the docs."""


TERMS: dict[str, RewardTerm] = {
    t.name: t
    for t in (
        RewardTerm(
            "mutation",
            "tester",
            "mutation_weight",
            mutation_term,
            _mutation_metrics,
            "live mutants of the reference killed by the suite's valid tests, each counted once",
        ),
        RewardTerm(
            "mutation_kinds",
            "tester",
            "mutation_kinds_weight",
            mutation_kinds_term,
            _mutation_kinds_metrics,
            "fault kinds of the live mutants of which the suite's valid tests kill at least one",
        ),
        RewardTerm(
            "golden",
            "coder",
            None,
            golden_term,
            _golden_metrics,
            "pass rate on the problem's golden tests (the Golden-Tests baseline's R_C)",
        ),
    )  # fmt: skip
}
"""Every reward term by name."""

MUTANT_TERMS: tuple[str, ...] = ("mutation", "mutation_kinds")
"""The terms whose input is :class:`MutantKills`: scoring draws and runs the training mutants when
one of them has a weight above 0."""

TESTER_TERMS: tuple[RewardTerm, ...] = tuple(t for t in TERMS.values() if t.role == "tester" and t.weight)
"""The terms R_T gains with a weight (``reward.<name>_weight``), in table order."""


def check_weights(weights: Mapping[str, float]) -> None:
    """``ValueError`` naming the first weight that is unknown, negative or not finite."""
    for name, w in weights.items():
        if name not in {t.name for t in TESTER_TERMS}:
            raise ValueError(
                f"unknown reward term {name!r}; known: {', '.join(t.name for t in TESTER_TERMS)}"
            )
        if not (w >= 0 and w < float("inf")):
            raise ValueError(f"the weight of the {name} term must be a finite number >= 0, got {w}")


def term_weights(reward: RewardConfig) -> dict[str, float]:
    """The weight of every tester term in a ``reward:`` section, by term name."""
    return {t.name: float(getattr(reward, t.weight)) for t in TESTER_TERMS if t.weight}


def active_terms(weights: Mapping[str, float] | None) -> list[tuple[RewardTerm, float]]:
    """The tester terms with a weight above 0, in table order, with their weights."""
    weights = weights or {}
    check_weights(weights)
    return [(t, weights[t.name]) for t in TESTER_TERMS if weights.get(t.name, 0.0) > 0]


def reward_options(reward: RewardConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`codea1.core.rewards.rewards` that a ``reward:`` section sets."""
    return {
        "alpha": reward.alpha,
        "n_norm": reward.n_norm,
        "normalize_by_suite": reward.normalize_by_suite,
        "nonprintable_penalty": reward.nonprintable_penalty,
        "term_weights": term_weights(reward),
    }
