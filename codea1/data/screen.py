"""Learnable problems: which problems a model solves sometimes but not always (pure, no I/O).

A GRPO group whose samples all get the same reward carries no gradient: with 4 samples, 66 % of
groups are such at pass rate 0.1 and 12.5 % at 0.5. Screening samples a model ``n`` times per
problem (``codea1 data screen``) and keeps the problems whose pass rate lies in a band.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def parse_band(text: str) -> tuple[float, float]:
    """``"LO:HI"`` → ``(lo, hi)`` with 0 <= lo <= hi <= 1; ``ValueError`` with the reason otherwise."""
    lo_text, sep, hi_text = text.partition(":")
    try:
        if not sep:
            raise ValueError
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        raise ValueError(f"band {text!r} must look like LO:HI, e.g. 0.1:0.9") from None
    if not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"band {text!r} must satisfy 0 <= LO <= HI <= 1")
    return lo, hi


def pass_rates(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per-problem fraction of correct samples of ``eval code`` records (0 for a problem with none)."""
    return {r["id"]: (sum(r["correct"]) / len(r["correct"]) if r["correct"] else 0.0) for r in records}


def in_band(rates: Mapping[str, float], lo: float, hi: float) -> list[str]:
    """The problem ids whose pass rate is in ``[lo, hi]``, in ``rates`` order."""
    return [pid for pid, rate in rates.items() if lo - 1e-12 <= rate <= hi + 1e-12]
