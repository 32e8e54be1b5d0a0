"""Write the report's single HTML page: run summary, figures, evaluation table, configurations.

The page is self-contained (inline CSS, no scripts, no external resources); figures are referenced
as PNG files next to it by relative name. Every piece of run data is HTML-escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from codea1.report.figures import FigureSpec, PlannedFigure
from codea1.report.runs import RunData

HEADLINE_KEYS = (
    "coder/reward_mean",
    "tester/reward_mean",
    "tester/validity_mean",
    "tester/val_mean",
    "tester/adversarial_mean",
    "tester/adv_mean",
    "exec/code_valid_rate",
    "exec/gen_pass_rate",
    "exec/new_test_pass_rate",
    "exec/history_pass_rate",
    "exec/golden_pass_rate",
    "replay/book_size",
    "replay/size",
)
"""Metrics whose last value the summary table shows (columns only for keys some run has)."""
TOTAL_TIME_KEY = "time/step"

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #eee; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
.muted { color: #666; } .warn { color: #8a4b00; } code { font-size: 0.9em; }
details { margin: 0.5em 0; } summary { cursor: pointer; } .scroll { overflow-x: auto; }
"""


def render_page(
    runs: list[RunData],
    figures: list[PlannedFigure],
    missing: list[FigureSpec],
    *,
    generated_at: str,
    smooth: int = 1,
) -> str:
    """The whole HTML page as a string."""
    e = html.escape
    names = ", ".join(run.name for run in runs)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>codea1 report: {e(names)}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>codea1 training report</h1>",
        f'<p class="muted">Runs: {e(names)}. Generated {e(generated_at)}.'
        + (f" Lines are moving averages over {smooth} steps." if smooth > 1 else "")
        + "</p>",
        _summary(runs),
        _warnings(runs),
        _contents(figures),
    ]
    for fig in figures:
        parts.append(_figure(fig))
    parts.append(_missing(missing))
    parts.append(_evaluation(runs))
    parts.append(_config_differences(runs))
    parts.append(_configs(runs))
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """Cells are given already escaped; numbers should be pre-formatted with :func:`_num`."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'


def _td(text: str) -> str:
    return f"<td>{html.escape(text)}</td>"


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _td("—" if value is None else str(value))
    if isinstance(value, float) and not math.isfinite(value):
        return '<td class="num">—</td>'
    text = f"{value:d}" if isinstance(value, int) else f"{value:.4g}"
    return f'<td class="num">{text}</td>'


def _summary(runs: list[RunData]) -> str:
    """One column per run: where it is, how far it got, and the last value of the headline metrics."""
    keys = [k for k in HEADLINE_KEYS if any(k in run.series for run in runs)]
    rows = [
        ["<th>directory</th>"] + [_td(str(run.path)) for run in runs],
        ["<th>steps logged</th>"] + [_num(run.n_rows) for run in runs],
        ["<th>last step</th>"] + [_num(run.last_step) for run in runs],
        ["<th>total step time (s)</th>"] + [_num(_total_seconds(run)) for run in runs],
    ]
    for key in keys:
        last = [run.series[key].last_finite() if key in run.series else None for run in runs]
        rows.append([f"<th>last <code>{html.escape(key)}</code></th>"] + [_num(v) for v in last])
    header = [""] + [html.escape(run.name) for run in runs]
    return "<h2>Runs</h2>" + _table(header, rows)


def _total_seconds(run: RunData) -> float | None:
    total = run.series.get(TOTAL_TIME_KEY)
    if total is None:
        return None
    return float(np.nansum(total.values))


def _warnings(runs: list[RunData]) -> str:
    items = [
        f"<li><b>{html.escape(run.name)}</b>: {html.escape(w)}</li>" for run in runs for w in run.warnings
    ]
    if not items:
        return ""
    return '<h2>Warnings</h2><ul class="warn">' + "".join(items) + "</ul>"


def _contents(figures: list[PlannedFigure]) -> str:
    links = [f'<li><a href="#fig-{fig.spec.name}">{html.escape(fig.spec.title)}</a></li>' for fig in figures]
    links += [
        '<li><a href="#not-plotted">Not plotted</a></li>',
        '<li><a href="#eval-table">Latest evaluation</a></li>',
    ]
    links += ['<li><a href="#configs">Configurations</a></li>']
    return "<h2>Contents</h2><ul>" + "".join(links) + "</ul>"


def _figure(fig: PlannedFigure) -> str:
    e = html.escape
    keys = fig.keys
    note = ""
    if fig.runs_without_data:
        note = f'<p class="warn">No data for this figure in: {e(", ".join(fig.runs_without_data))}.</p>'
    return (
        f'<h2 id="fig-{e(fig.spec.name)}">{e(fig.spec.title)}</h2>'
        f"<p>{e(fig.spec.about)}</p>"
        f'<img src="{e(fig.file_name)}" alt="{e(fig.spec.title)}">'
        f'<p class="muted">Keys: {", ".join(f"<code>{e(k)}</code>" for k in keys)}</p>{note}'
    )


def _missing(missing: list[FigureSpec]) -> str:
    e = html.escape
    if not missing:
        return '<h2 id="not-plotted">Not plotted</h2><p>Every figure had data.</p>'
    items = []
    for spec in missing:
        patterns = ", ".join(f"<code>{e(p)}</code>" for panel in spec.panels for p in panel.patterns)
        items.append(f"<li><b>{e(spec.title)}</b>: no run logged a key matching {patterns}.</li>")
    return (
        '<h2 id="not-plotted">Not plotted</h2><p>These figures have no data:</p><ul>'
        + "".join(items)
        + "</ul>"
    )


def _evaluation(runs: list[RunData]) -> str:
    e = html.escape
    with_eval = [run for run in runs if run.eval_table is not None]
    if not with_eval:
        return '<h2 id="eval-table">Latest evaluation</h2><p>No run has evaluation results (<code>eval/*.json</code>).</p>'
    metrics: list[str] = []
    for run in with_eval:
        for values in run.eval_table.rows.values():  # type: ignore[union-attr]
            metrics += [m for m in values if m not in metrics]
    with_deltas = any(run.eval_table.deltas for run in with_eval)  # type: ignore[union-attr]
    rows = []
    for run in with_eval:
        table = run.eval_table
        assert table is not None
        source = f"eval/{table.source}" + (f" (step {table.step})" if table.step is not None else "")
        for bench, values in table.rows.items():
            row = [_td(run.name), _td(source), _td(bench)] + [_num(values.get(m)) for m in metrics]
            if with_deltas:
                row += _delta_cells(table.deltas.get(bench), table.baseline_step)
            rows.append(row)
    header = ["run", "file", "benchmark"] + [e(m) for m in metrics]
    note = ""
    if with_deltas:
        header += ["vs step", "before", "after", "Δ", "95 % CI of Δ", "p two-sided"]
        note = (
            " Δ compares the newest evaluation with the run's earliest one of the same benchmark (e.g. the "
            "base model saved as step 0): mean fraction of correct samples per problem, in percent, with a "
            "paired bootstrap over problems (2,000 resamples) and a two-sided sign-flip p "
            "(<code>codea1 eval compare</code> gives more)."
        )
    return (
        '<h2 id="eval-table">Latest evaluation</h2>'
        "<p>The newest evaluation files of each run (highest step, all benchmarks of that step; a file without a "
        f"step counts as final).{note}</p>" + _table(header, rows)
    )


def _delta_cells(delta: Any, baseline_step: int | None) -> list[str]:
    if delta is None:
        return [_td("—")] * 6
    step = _td("—" if baseline_step is None else str(baseline_step))
    ci = f"[{100 * delta.ci_low:+.1f}, {100 * delta.ci_high:+.1f}]"
    return [
        step, _num(100 * delta.before), _num(100 * delta.after),
        _td(f"{100 * delta.delta:+.1f}"), _td(ci), _num(delta.p_two_sided),
    ]  # fmt: skip


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): obj}


def _config_differences(runs: list[RunData]) -> str:
    parsed = [run for run in runs if run.config is not None]
    if len(parsed) < 2:
        return ""
    flat = [_flatten(run.config) for run in parsed]
    keys = sorted(set().union(*flat))
    differing = [k for k in keys if len({repr(f.get(k, "<unset>")) for f in flat}) > 1]
    if not differing:
        return "<h2>Configuration differences</h2><p>The runs' configurations are identical.</p>"
    rows = [[_td(k)] + [_td(repr(f[k]) if k in f else "(unset)") for f in flat] for k in differing]
    header = ["key"] + [html.escape(run.name) for run in parsed]
    return "<h2>Configuration differences</h2>" + _table(header, rows)


def _configs(runs: list[RunData]) -> str:
    e = html.escape
    blocks = []
    for run in runs:
        if run.config_text is None:
            blocks.append(f"<p><b>{e(run.name)}</b>: no config.yaml.</p>")
            continue
        blocks.append(
            f"<details><summary><b>{e(run.name)}</b>: config.yaml</summary>"
            f"<pre>{e(run.config_text)}</pre></details>"
        )
    return '<h2 id="configs">Configurations</h2><p>Resolved configuration of each run.</p>' + "".join(blocks)
