"""Training-run reports: PNG plots of a run's metrics (several runs overlaid) and one HTML page.

``build_report(run_dirs, output)`` reads each run directory (``metrics.jsonl``, ``config.yaml``,
``eval/*.json``), draws the figures listed in :data:`codea1.report.figures.FIGURES` and writes
``index.html`` next to them. Layer L4: imports ``codea1.tracking`` and lower, never the cli.
"""

from codea1.report.build import ReportResult, build_report, default_output
from codea1.report.runs import ReportError

__all__ = ["ReportError", "ReportResult", "build_report", "default_output"]
