"""Compare two evaluations of the same problems (before vs after training).

Each side is the per-problem records of ``codea1 eval code`` (``{"id", "source", "correct": [...]}``)
or of ``codea1 eval tests`` (``{"id", "source", "k", "valid", "killed", "mutants", "equivalent",
...}``). A problem's score is one of :data:`METRICS`, and the difference of the mean scores gets a
paired bootstrap interval and a two-sided sign-flip p-value per benchmark and over all problems
(:mod:`codea1.core.bootstrap`). A side may be several evaluations of the same problems (training
seeds): each problem's score is averaged over them before pairing, as ``codea1 compare`` averages a
method's seeds. Used by ``codea1 eval compare`` and by the report's evaluation table.

Pure: no I/O (callers read the files).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from codea1.core.bootstrap import PairedDelta, paired_bootstrap

METRICS = {
    "pass": "code records: the fraction of a problem's samples that are correct (avg@n)",
    "valid": "test records: valid tests / k requested (a test not written counts as not valid: pass@k)",
    "killed": "test records: mutants killed / live mutants (problems without live mutants are left out)",
}
"""The per-problem scores :func:`problem_scores` computes."""


def problem_scores(
    records: Sequence[Mapping[str, Any]], label: str, metric: str = "pass"
) -> dict[str, tuple[str, float]]:
    """``id -> (source, score)`` for one of :data:`METRICS`; ``ValueError`` on malformed records."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r} (one of {', '.join(METRICS)})")
    out: dict[str, tuple[str, float]] = {}
    for i, r in enumerate(records):
        if "id" not in r:
            raise ValueError(f"{label}: record {i} lacks an id")
        score = _score(r, metric)
        if isinstance(score, str):
            raise ValueError(f"{label}: record {i} ({r['id']}) {score}")
        if score is not None:
            out[str(r["id"])] = (str(r.get("source") or "unknown"), score)
    return out


def _score(r: Mapping[str, Any], metric: str) -> float | str | None:
    """One record's score, ``None`` when the metric does not apply to it, or why it cannot be read."""
    if metric == "pass":
        correct = r.get("correct")
        if not isinstance(correct, list) or not correct:
            return "lacks a non-empty 'correct' list (for `eval tests` results use --metric valid or killed)"
        return sum(bool(c) for c in correct) / len(correct)
    numbers = {key: r.get(key) for key in ("k", "valid", "killed", "mutants", "equivalent")}
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in numbers.values()):
        return "lacks the counts k, valid, killed, mutants, equivalent (an `eval tests` record?)"
    if metric == "valid":
        return min(numbers["valid"], numbers["k"]) / numbers["k"] if numbers["k"] else 0.0
    live = numbers["mutants"] - numbers["equivalent"]
    return numbers["killed"] / live if live > 0 else None


def restrict(records: Sequence[Mapping[str, Any]], ids: set[str]) -> list[Mapping[str, Any]]:
    """The records whose problem id is in ``ids`` (``eval compare --problems``)."""
    return [r for r in records if str(r.get("id")) in ids]


def compare_records(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    metric: str = "pass",
) -> dict[str, PairedDelta]:
    """Paired deltas per benchmark (the records' ``source``), plus ``all`` when there are several.

    Both sides must cover exactly the same problem ids; otherwise ``ValueError`` names how many
    are missing on each side (comparing different problem sets would not be paired).
    """
    return compare_sides(
        [before], [after], resamples=resamples, confidence=confidence, seed=seed, metric=metric
    )


def compare_sides(
    before: Sequence[Sequence[Mapping[str, Any]]],
    after: Sequence[Sequence[Mapping[str, Any]]],
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    metric: str = "pass",
) -> dict[str, PairedDelta]:
    """:func:`compare_records` with one or more evaluations per side (e.g. one per training seed).

    Each problem's score is the mean of its scores in the side's evaluations (:func:`averaged_scores`),
    then the two sides are paired by problem. ``ValueError`` as :func:`compare_records`, or when the
    evaluations of one side do not score the same problems.
    """
    b = averaged_scores(before, "before", metric)
    a = averaged_scores(after, "after", metric)
    only_b, only_a = sorted(set(b) - set(a)), sorted(set(a) - set(b))
    if only_b or only_a:
        example = (only_b or only_a)[0]
        raise ValueError(
            f"the two evaluations cover different problems: {len(only_b)} only before, "
            f"{len(only_a)} only after (e.g. {example}); evaluate both on the same data"
        )
    ids = sorted(b)
    if not ids:
        raise ValueError(f"no problem has a {metric!r} score on both sides")
    groups: dict[str, list[str]] = {}
    for pid in ids:
        groups.setdefault(b[pid][0], []).append(pid)
    if len(groups) > 1:
        groups["all"] = ids
    return {
        name: paired_bootstrap(
            [b[p][1] for p in members],
            [a[p][1] for p in members],
            resamples=resamples,
            confidence=confidence,
            seed=seed,
        )
        for name, members in groups.items()
    }


def averaged_scores(
    evaluations: Sequence[Sequence[Mapping[str, Any]]], label: str, metric: str = "pass"
) -> dict[str, tuple[str, float]]:
    """``id -> (source, mean score)`` over several evaluations of the same problems (seeds).

    ``ValueError`` when there is none, or when one scores other problems than the first (a seed
    evaluated on other data, or a problem with live mutants in one file and none in another).
    """
    if not evaluations:
        raise ValueError(f"{label}: no evaluation given")
    scored = [
        problem_scores(records, label if len(evaluations) == 1 else f"{label} file {i + 1}", metric)
        for i, records in enumerate(evaluations)
    ]
    first = scored[0]
    for i, other in enumerate(scored[1:], start=2):
        if set(other) != set(first):
            missing, extra = sorted(set(first) - set(other)), sorted(set(other) - set(first))
            example = (missing or extra)[0]
            raise ValueError(
                f"{label}: file {i} scores other problems than file 1 ({len(missing)} missing, "
                f"{len(extra)} more, e.g. {example}); a side's files must evaluate the same problems"
            )
    return {pid: (source, sum(s[pid][1] for s in scored) / len(scored)) for pid, (source, _) in first.items()}


def delta_table(deltas: Mapping[str, PairedDelta], *, one_sided: bool = False) -> dict[str, dict[str, float]]:
    """Rows for :func:`codea1.eval.tables.format_table` and the JSON output, scores in percent.

    The p-value is the two-sided sign-flip one (``p_two_sided``); ``one_sided`` adds the one-sided
    p of "after is better" as ``p_one_sided_after_better``, for a direction named in advance.
    """
    rows: dict[str, dict[str, float]] = {}
    for name, d in deltas.items():
        level = round(100 * d.confidence)
        rows[name] = {
            "before": 100 * d.before,
            "after": 100 * d.after,
            "delta": 100 * d.delta,
            f"ci{level}_low": 100 * d.ci_low,
            f"ci{level}_high": 100 * d.ci_high,
            "p_two_sided": d.p_two_sided,
        }
        if one_sided:
            rows[name]["p_one_sided_after_better"] = d.p_one_sided
        rows[name].update({"improved": d.improved, "worsened": d.worsened, "problems": d.problems})
    return rows
