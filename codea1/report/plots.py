"""Draw the report's figures as PNG files with matplotlib (object API, Agg canvas; no pyplot state).

Colours: with one run, each metric key gets a colour; with several runs, each run gets a colour
(legend = run name) and each key a line style. The x axis is always the training step. Files are
written to a temporary name and renamed.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from codea1.report.figures import PlannedFigure
from codea1.report.runs import RunData, Series

DPI = 110
LINE_STYLES = ("-", "--", ":", "-.")
KEY_MARKERS = (None, "^", "s", "x")
"""With several runs, key k is drawn with LINE_STYLES[k % 4] and, past four keys, KEY_MARKERS[k // 4]."""
MARKER_MAX_POINTS = 20
"""Series with at most this many points also get markers (single points stay visible)."""
LEGEND_OUTSIDE = {
    "loc": "upper left",
    "bbox_to_anchor": (1.01, 1.0),
    "fontsize": 8,
    "frameon": False,
    "alignment": "left",
}


def colour(i: int, n: int) -> tuple[float, float, float, float]:
    """The i-th of n distinguishable colours (tab10, or tab20 beyond ten)."""
    from matplotlib import colormaps

    if n <= 10:
        return colormaps["tab10"](i % 10)
    return colormaps["tab20"](i % 20)


def smoothed(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` steps, ignoring NaNs (NaN where the window has none)."""
    if window <= 1 or values.size == 0:
        return values
    finite = np.isfinite(values)
    sums = np.concatenate([[0.0], np.cumsum(np.where(finite, values, 0.0))])
    counts = np.concatenate([[0], np.cumsum(finite)])
    hi = np.arange(1, values.size + 1)
    lo = np.maximum(hi - window, 0)
    n = counts[hi] - counts[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (sums[hi] - sums[lo]) / np.maximum(n, 1), np.nan)


def render(planned: PlannedFigure, runs: list[RunData], path: Path, smooth: int = 1) -> None:
    """Draw one planned figure for the given runs and write it to ``path`` (PNG)."""
    kind = planned.spec.kind
    if kind == "stacked":
        fig = _stacked(planned, runs)
    elif kind == "grid":
        fig = _grid(planned, runs, smooth)
    else:
        fig = _lines(planned, runs, smooth)
    _save(fig, path)


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    tmp = path.with_name(f".{path.name}.tmp")
    # every legend drawn outside the axes is in the image, however long the run names: the
    # constrained layout and a tight box count an axes' last legend only, not the run legend before it
    legends = [a for ax in fig.axes for a in ax.get_children() if isinstance(a, Legend)]
    extra = [*fig.get_default_bbox_extra_artists(), *legends]  # the titles among the defaults
    fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.1, bbox_extra_artists=extra)
    os.replace(tmp, path)


def key_style(k: int) -> dict[str, object]:
    """Line style (and marker, past four keys) that tells metric k apart when colour means the run."""
    return {"linestyle": LINE_STYLES[k % 4], "marker": KEY_MARKERS[(k // 4) % len(KEY_MARKERS)]}


def _plot_series(
    ax: Axes,
    series: Series,
    colour_: object,
    label: str | None,
    smooth: int,
    style: dict[str, object] | None = None,
) -> None:
    style = dict(style or {"linestyle": "-", "marker": None})
    if style["marker"] is None and series.steps.size <= MARKER_MAX_POINTS:
        style["marker"] = "o"  # few points: keep each one visible
    style["markevery"] = max(1, series.steps.size // 12)
    if smooth > 1:
        ax.plot(
            series.steps, series.values, color=colour_, linestyle=style["linestyle"], linewidth=0.8, alpha=0.3
        )
        ax.plot(
            series.steps, smoothed(series.values, smooth), color=colour_, label=label, markersize=4, **style
        )
    else:
        ax.plot(series.steps, series.values, color=colour_, label=label, markersize=4, **style)
    if series.low is not None and series.high is not None:  # a 95 % band (evaluation points)
        ax.fill_between(series.steps, series.low, series.high, color=colour_, alpha=0.18, linewidth=0)


def _widen_single_step(axes: list[Axes], runs: list[RunData], keys: list[str]) -> None:
    """When the figure holds one step only, centre it in [step - 1, step + 1] (whole-number ticks)."""
    steps = {int(x) for run in runs for k in keys if k in run.series for x in run.series[k].steps}
    if len(steps) == 1:
        (step,) = steps
        for ax in axes:
            ax.set_xlim(step - 1, step + 1)


def _style_axes(ax: Axes, ylabel: str, bottom: bool, unit_range: bool = False) -> None:
    ax.grid(True, alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    if bottom:
        ax.set_xlabel("step")
    if unit_range:
        ax.set_ylim(-0.03, 1.03)


def _lines(planned: PlannedFigure, runs: list[RunData], smooth: int) -> Figure:
    panels = [
        (spec, keys) for spec, keys in zip(planned.spec.panels, planned.panel_keys, strict=True) if keys
    ]
    fig = Figure(figsize=(9.0, 0.7 + 3.0 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    many_runs = len(runs) > 1
    for row, (ax, (panel, keys)) in enumerate(zip(axes, panels, strict=True)):
        for r, run in enumerate(runs):
            for k, key in enumerate(keys):
                series = run.series.get(key)
                if series is None:
                    continue
                if many_runs:
                    _plot_series(ax, series, colour(r, len(runs)), None, smooth, key_style(k))
                else:
                    _plot_series(ax, series, colour(k, len(keys)), key, smooth)
        unit = panel.unit_range and _within_unit_range(runs, keys)
        _style_axes(ax, panel.ylabel, bottom=row == len(panels) - 1, unit_range=unit)
        if many_runs:
            _run_and_key_legends(ax, runs, keys)
        else:
            ax.legend(**LEGEND_OUTSIDE)
    _widen_single_step(list(axes), runs, planned.keys)
    fig.suptitle(_title(planned, smooth))
    return fig


def _within_unit_range(runs: list[RunData], keys: tuple[str, ...]) -> bool:
    """Whether every finite value of these keys lies in [0, 1] (else the y axis stays automatic)."""
    values = [run.series[k].values for run in runs for k in keys if k in run.series]
    finite = np.concatenate(values)[np.isfinite(np.concatenate(values))] if values else np.array([])
    return bool(finite.size == 0 or (finite.min() >= 0.0 and finite.max() <= 1.0))


def _run_and_key_legends(ax: Axes, runs: list[RunData], keys: tuple[str, ...]) -> None:
    """Two legends: colour = run, line style = metric key (only entries that have data)."""
    present = [r for r, run in enumerate(runs) if any(k in run.series for k in keys)]
    run_handles = [Line2D([], [], color=colour(r, len(runs))) for r in present]
    legend = ax.legend(run_handles, [runs[r].name for r in present], title="run", **LEGEND_OUTSIDE)
    ax.add_artist(legend)
    if keys:
        key_handles = [Line2D([], [], color="0.3", markersize=4, **key_style(k)) for k in range(len(keys))]
        options = dict(LEGEND_OUTSIDE, loc="lower left", bbox_to_anchor=(1.01, 0.0))
        ax.legend(key_handles, list(keys), title="metric", **options)


def _grid(planned: PlannedFigure, runs: list[RunData], smooth: int) -> Figure:
    keys = [k for panel in planned.panel_keys for k in panel]
    ncols = min(3 if len(keys) <= 9 else 4, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig = Figure(figsize=(1.0 + 3.6 * ncols, 0.8 + 2.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, squeeze=False).ravel()
    for i, key in enumerate(keys):
        ax = axes[i]
        for r, run in enumerate(runs):
            series = run.series.get(key)
            if series is not None:
                _plot_series(ax, series, colour(r, len(runs)), run.name, smooth)
        ax.set_title(key, fontsize=9)
        _style_axes(ax, "", bottom=i >= len(keys) - ncols)
        ax.tick_params(labelsize=8, labelbottom=True)
    for ax in axes[len(keys) :]:
        ax.set_visible(False)
    _widen_single_step(list(axes), runs, keys)
    present = [r for r, run in enumerate(runs) if any(k in run.series for k in keys)]
    if len(runs) > 1:
        handles = [Line2D([], [], color=colour(r, len(runs))) for r in present]
        names = [runs[r].name for r in present]
        fig.legend(handles, names, loc="outside upper right", fontsize=8, title="run", alignment="left")
    fig.suptitle(_title(planned, smooth))
    return fig


def _stacked(planned: PlannedFigure, runs: list[RunData]) -> Figure:
    phases = list(planned.panel_keys[0])
    total_key = planned.total_key
    shown = [run for run in runs if any(k in run.series for k in planned.keys)]
    fig = Figure(figsize=(9.0, 0.7 + 2.8 * len(shown)), layout="constrained")
    # runs can differ in speed by orders of magnitude: each keeps its own y scale
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    for row, (ax, run) in enumerate(zip(axes, shown, strict=True)):
        steps = np.array(sorted({int(s) for k in phases if k in run.series for s in run.series[k].steps}))
        edges = _step_edges(steps)
        bottom = np.zeros(steps.size)
        handles, labels = [], []
        for p, key in enumerate(phases):
            if key not in run.series:
                continue
            top = bottom + _on_steps(run.series[key], steps)
            # one filled staircase per phase: a block per step, cheap to draw for long runs
            handles.append(ax.stairs(top, edges, baseline=bottom, fill=True, color=colour(p, len(phases))))
            labels.append(key)
            bottom = top
        if total_key in run.series:
            total = run.series[total_key]
            (line,) = ax.plot(total.steps, total.values, color="black", linewidth=1.2, marker=".")
            handles.append(line)
            labels.append(total_key)
        _style_axes(ax, planned.spec.panels[0].ylabel, bottom=row == len(shown) - 1)
        ax.set_ylim(bottom=0)
        if len(shown) > 1:
            ax.set_title(run.name, fontsize=9, loc="left")
        # legend top to bottom in the order of the stack (total first, it is drawn on top)
        ax.legend(handles[::-1], labels[::-1], **LEGEND_OUTSIDE)
    _widen_single_step(list(axes), shown, planned.keys)
    fig.suptitle(planned.spec.title)
    return fig


def _step_edges(steps: np.ndarray) -> np.ndarray:
    """Block edges around each step: halfway to its neighbours, half a gap beyond the ends."""
    if steps.size == 0:
        return np.array([0.0])
    if steps.size == 1:
        return np.array([steps[0] - 0.5, steps[0] + 0.5])
    mids = (steps[:-1] + steps[1:]) / 2.0
    return np.concatenate([[steps[0] - (mids[0] - steps[0])], mids, [steps[-1] + (steps[-1] - mids[-1])]])


def _on_steps(series: Series, steps: np.ndarray) -> np.ndarray:
    """The series' values on ``steps`` (0 where a step has no value or a null)."""
    lookup = dict(zip(series.steps.tolist(), series.values.tolist(), strict=True))
    values = np.array([lookup.get(int(s), 0.0) for s in steps], dtype=float)
    return np.where(np.isfinite(values), values, 0.0)


def _title(planned: PlannedFigure, smooth: int) -> str:
    suffix = f"\n(moving average over {smooth} steps; raw values faint)" if smooth > 1 else ""
    return planned.spec.title + suffix
