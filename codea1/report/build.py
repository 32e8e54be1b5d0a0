"""``build_report``: read runs, plan and draw the figures, write the HTML page.

The output directory holds ``index.html`` and one PNG per figure with data. PNGs of figures this
report no longer draws (left by an earlier report into the same directory) are removed so the
directory always matches the page.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from codea1.report.figures import plan_figures
from codea1.report.html import render_page
from codea1.report.plots import render
from codea1.report.runs import ReportError, RunData, load_runs
from codea1.tracking import atomic_write_text

PAGE_FILE = "index.html"
OWNED_MARKER = ".codea1-report"
"""Marks a directory as written by this command (only there are stale PNGs removed)."""


@dataclass(frozen=True)
class ReportResult:
    """What a report wrote."""

    page: Path
    figures: tuple[Path, ...]
    missing: tuple[str, ...]
    """Titles of the figures without data in any run."""
    runs: tuple[RunData, ...]

    @property
    def warnings(self) -> list[str]:
        """Every run's warnings, prefixed with the run name."""
        return [f"{run.name}: {w}" for run in self.runs for w in run.warnings]


def default_output(run_dirs: list[Path]) -> Path:
    """``RUN_DIR/report`` for one run, ``./report`` for several."""
    return Path(run_dirs[0]) / "report" if len(run_dirs) == 1 else Path("report")


def build_report(run_dirs: list[Path], output: Path | None = None, *, smooth: int = 1) -> ReportResult:
    """Write the report of one or more runs (overlaid) into ``output``; see the module docstring.

    Raises :class:`ReportError` when a run directory is missing or is not a run directory, or when
    ``output`` cannot be used.
    """
    if smooth < 1:
        raise ReportError(f"smooth must be at least 1 (got {smooth})")
    runs = load_runs([Path(p) for p in run_dirs])
    out = Path(output) if output is not None else default_output([Path(p) for p in run_dirs])
    if out.exists() and not out.is_dir():
        raise ReportError(f"output {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    planned, missing = plan_figures({run.name: set(run.series) for run in runs})
    written = []
    for fig in planned:
        path = out / fig.file_name
        render(fig, runs, path, smooth=smooth)
        written.append(path)
    _remove_stale(out, {p.name for p in written})
    page = out / PAGE_FILE
    html = render_page(runs, planned, missing, generated_at=time.strftime("%Y-%m-%d %H:%M:%S"), smooth=smooth)
    atomic_write_text(page, html)
    return ReportResult(page, tuple(written), tuple(spec.title for spec in missing), tuple(runs))


def _remove_stale(out: Path, keep: set[str]) -> None:
    marker = out / OWNED_MARKER
    if marker.exists():
        for png in out.glob("*.png"):
            if png.name not in keep:
                png.unlink()
    else:
        marker.write_text(
            "written by `codea1 report`; PNGs here are replaced on each report\n", encoding="utf-8"
        )


__all__ = ["ReportError", "ReportResult", "build_report", "default_output"]
