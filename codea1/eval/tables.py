"""Result tables: per-problem records grouped by benchmark, and metrics printed as a plain table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def format_table(metrics: Mapping[str, Mapping[str, float]], title: str = "") -> str:
    """A plain-text table: one row per benchmark, one column per metric (values already scaled)."""
    columns: list[str] = []
    for row in metrics.values():
        columns += [c for c in row if c not in columns]
    header = ["benchmark", *columns]
    body = [[name, *(_fmt(row.get(c)) for c in columns)] for name, row in metrics.items()]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body, strict=False)]
    lines = [title] if title else []
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)))
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=False)) for r in body]
    return "\n".join(lines)


def _fmt(v: float | int | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return str(v)
    return f"{v:.2f}"


def group_by_source(records: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Per-problem records grouped by benchmark (their ``source``), plus ``all`` when there are several."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["source"] or "unknown", []).append(r)
    if len(groups) > 1:
        groups["all"] = list(records)
    return groups
