"""Compare two code-generation evaluations of the same problems (before vs after training).

Each side is the per-problem records of ``codea1 eval code`` (``{"id", "source", "correct": [...]}``).
A problem's score is its fraction of correct samples (avg@n), and the difference of the mean scores
gets a paired bootstrap interval per benchmark and over all problems (:mod:`codea1.core.bootstrap`).
Used by ``codea1 eval compare`` and by the report's evaluation table.

Pure: no I/O (callers read the files).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from codea1.core.bootstrap import PairedDelta, paired_bootstrap


def problem_scores(records: Sequence[Mapping[str, Any]], label: str) -> dict[str, tuple[str, float]]:
    """``id -> (source, fraction of correct samples)``; raises ``ValueError`` on malformed records."""
    out: dict[str, tuple[str, float]] = {}
    for i, r in enumerate(records):
        correct = r.get("correct")
        if "id" not in r or not isinstance(correct, list) or not correct:
            raise ValueError(f"{label}: record {i} lacks an id or a non-empty 'correct' list")
        out[str(r["id"])] = (str(r.get("source") or "unknown"), sum(bool(c) for c in correct) / len(correct))
    return out


def compare_records(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, PairedDelta]:
    """Paired deltas per benchmark (the records' ``source``), plus ``all`` when there are several.

    Both sides must cover exactly the same problem ids; otherwise ``ValueError`` names how many
    are missing on each side (comparing different problem sets would not be paired).
    """
    b = problem_scores(before, "before")
    a = problem_scores(after, "after")
    only_b, only_a = sorted(set(b) - set(a)), sorted(set(a) - set(b))
    if only_b or only_a:
        example = (only_b or only_a)[0]
        raise ValueError(
            f"the two evaluations cover different problems: {len(only_b)} only before, "
            f"{len(only_a)} only after (e.g. {example}); evaluate both on the same data"
        )
    ids = sorted(b)
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


def delta_table(deltas: Mapping[str, PairedDelta]) -> dict[str, dict[str, float]]:
    """Rows for :func:`codea1.eval.tables.format_table` and the JSON output, scores in percent."""
    rows: dict[str, dict[str, float]] = {}
    for name, d in deltas.items():
        level = round(100 * d.confidence)
        rows[name] = {
            "before": 100 * d.before,
            "after": 100 * d.after,
            "delta": 100 * d.delta,
            f"ci{level}_low": 100 * d.ci_low,
            f"ci{level}_high": 100 * d.ci_high,
            "p_not_better": d.p_not_better,
            "improved": d.improved,
            "worsened": d.worsened,
            "problems": d.problems,
        }
    return rows
