"""The lines ``codea1 train`` prints at the end of a run: what changed from its first step to its last.

Each step draws other problems, so a change between two steps is not a measure of learning (an
``eval:`` block is, docs/metrics.md); the lines show that the loop turned rewards, tests and the
Mistake Book over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ROWS: tuple[tuple[str, str, str], ...] = (
    ("coder/reward_mean", "coder reward (mean R_C)", "{:.3f}"),
    ("coder/zero_variance_fraction", "coder groups with equal rewards", "{:.0%}"),
    ("exec/code_valid_rate", "code samples that load", "{:.0%}"),
    ("tester/reward_mean", "tester reward (mean R_T)", "{:.3f}"),
    ("tester/valid_tests_mean", "valid tests per suite", "{:.2f}"),
    ("tester/invalid_tests_mean", "invalid tests per suite", "{:.2f}"),
    ("replay/book_size", "Mistake Book tests", "{:.0f}"),
)
"""(metric, label, format) of each line, in the order printed."""


def what_changed(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``label  first → last`` for each metric of :data:`ROWS` that the first and last of ``rows``
    (the run's ``metrics.jsonl`` lines) both hold; no lines for fewer than two steps."""
    if len(rows) < 2:
        return []
    first, last = rows[0], rows[-1]
    width = max(len(label) for _, label, _ in ROWS)
    lines = [
        f"what changed, step {first.get('step', '?')} -> {last.get('step', '?')} (each step draws other problems):"
    ]
    for key, label, fmt in ROWS:
        a, b = first.get(key), last.get(key)
        if isinstance(a, int | float) and isinstance(b, int | float):
            lines.append(f"  {label:<{width}}  {fmt.format(a)} -> {fmt.format(b)}")
    return lines
