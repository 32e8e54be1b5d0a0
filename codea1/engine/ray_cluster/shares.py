"""How the Ray backend cuts work across actors and puts their answers back together (pure): a
batch's share of each rank is ``batch.slice(*span)`` over :func:`spans`.

Imports: core.cuts, core.losses.
"""

from __future__ import annotations

from collections.abc import Sequence

from codea1.core.cuts import even_cuts
from codea1.core.losses import ADDITIVE_STATS


def spans(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``[lo, hi)`` spans covering ``range(count)``, sizes differing by at most
    one, some empty when ``count < parts``: :func:`~codea1.core.cuts.even_cuts`, the rule the
    trainer cuts its mini-batches by."""
    return [(cut.start, cut.stop) for cut in even_cuts(count, parts)]


def merge_step_stats(per_rank: Sequence[dict[str, float]], weights: Sequence[float]) -> dict[str, float]:
    """One optimizer step's stats from its ranks' stats.

    Each rank's ``loss`` and additive stats are its share of the whole batch's, so they add up;
    ``tokens`` add up; the other loss statistics are means over the rank's share and are averaged
    with ``weights`` (the ranks' response tokens or sequences); ``grad_norm`` and ``lr`` are the
    same on every rank; ``seconds`` and ``skipped`` take the largest.
    """
    total = sum(weights) or 1.0
    out: dict[str, float] = {}
    for key in per_rank[0]:
        values = [stats.get(key, 0.0) for stats in per_rank]
        if key in ("grad_norm", "lr"):
            out[key] = values[0]
        elif key in ("seconds", "skipped"):
            out[key] = max(values)
        elif key in ("loss", "tokens") or key in ADDITIVE_STATS:
            out[key] = sum(values)
        else:
            out[key] = sum(v * w for v, w in zip(values, weights, strict=True)) / total
    return out
