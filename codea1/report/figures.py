"""Which metric keys go into which figure: the table that drives every plot of the report.

A figure is a list of panels; a panel plots every metric key that matches one of its shell-style
patterns (``*`` spans ``/``). Keys are matched in table order and each key is plotted once, so a
later, broader pattern only picks up what the earlier figures left. Keys that no figure claims are
still plotted, in one "other metrics" figure per namespace. Matching is pure (no plotting here):
:func:`plan_figures` turns the table and the keys present in the runs into :class:`PlannedFigure`
objects, and lists the figures that have no data.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

FigureKind = Literal["lines", "stacked", "grid"]


@dataclass(frozen=True)
class PanelSpec:
    """One set of axes: the keys it plots and how its y axis is labelled."""

    ylabel: str
    patterns: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    """Patterns of keys this panel never takes (they stay free for later figures)."""
    unit_range: bool = False
    """Values are rates in [0, 1]: fix the y axis to that range."""


@dataclass(frozen=True)
class FigureSpec:
    """One PNG of the report.

    ``kind``: ``lines``: every key of a panel is a line (runs overlaid); ``stacked``: the keys of
    the single panel are stacked per step (one subplot per run), and ``total_key`` is drawn over
    them as a line; ``grid``: one small subplot per key (for keys with unrelated scales).
    """

    name: str
    """File stem of the PNG."""
    title: str
    panels: tuple[PanelSpec, ...]
    about: str
    """How to read the figure (one or two sentences, shown under it in the HTML page)."""
    kind: FigureKind = "lines"
    total_key: str = ""
    per_key_for_runs: bool = False
    """With several runs, one figure per key (``<name>_<key>.png``, the runs overlaid, each with its
    band) instead of one panel per key: the comparison of runs, metric by metric."""


PHASE_ORDER = tuple(
    f"time/{phase}"
    for phase in (
        "sample_problems",
        "coder_rollout",
        "code_extraction",
        "tester_prompts",
        "tester_rollout",
        "execution",
        "sandbox",
        "mistake_book",
        "advantages",
        "update",
        "update_coder",
        "update_tester",
        "push_weights",
        "metrics",
    )
)
"""Phases of a step in the order they run (docs/metrics.md), stacked bottom to top; others go last."""

FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        name="coder_reward",
        title="Code LLM reward",
        panels=(
            PanelSpec("reward", ("coder/reward*", "coder/trained_reward*")),
            PanelSpec(
                "fraction of code samples",
                ("exec/code_valid*", "coder/*valid*", "coder/extract*"),
                unit_range=True,
            ),
        ),
        about="R_C per code sample (½ Mistake-Book pass rate + ½ pass rate on its own new tests) with its "
        "spread, and the share of code samples from which code was extracted and whose definitions "
        "loaded in the sandbox (valid). Expect the reward to rise (paper, α = 0.5: about 0.45 → 0.76 over ~110 steps).",
    ),
    FigureSpec(
        name="tester_reward",
        title="Test LLM reward with its Val and Adv terms",
        panels=(
            PanelSpec(
                "reward",
                (
                    "tester/reward_mean",
                    "tester/reward_std",
                    "tester/trained_reward*",
                    "tester/val_mean",
                    "tester/validity*",
                    "tester/adv_mean",
                    "tester/adversarial*",
                ),
            ),
            PanelSpec("tests per suite", ("tester/valid_tests*", "tester/invalid_tests*")),
        ),
        about="R_T = α·Val + (1−α)·Adv per test suite. Val rewards executable tests with correct expected "
        "values, Adv rewards tests that the code fails. A healthy run keeps Val high while Adv does not "
        "collapse to 0; the lower panel counts valid and invalid tests per suite.",
    ),
    FigureSpec(
        name="pass_rates",
        title="Pass rates of the code on new and Mistake-Book tests",
        panels=(PanelSpec("pass rate", ("exec/*pass_rate*",), unit_range=True),),
        about="How often code passes the valid tests written for it this step (new, exec/gen_pass_rate) "
        "and the Mistake-Book tests replayed for its problem (history). The history rate starts once tests "
        "come back to a problem and sits below the new-test rate, because replayed tests broke code before.",
    ),
    FigureSpec(
        name="mistake_book",
        title="Mistake Book",
        panels=(
            PanelSpec("tests in the book", ("replay/book_size*", "replay/size*")),
            PanelSpec("tests per step", ("replay/added*", "replay/removed*", "replay/evicted*")),
            PanelSpec("frequency updates", ("replay/incremented*", "replay/decremented*", "replay/skipped*")),
            PanelSpec(
                "replayed this step",
                (
                    "replay/tests_retrieved*",
                    "replay/problems_hit*",
                    "replay/*hit*",
                    "exec/codes_with_history*",
                ),
            ),
        ),
        about="Size of the Mistake Book; tests added (first failure by a valid code), removed (frequency "
        "back to 0 after passes) and evicted (capacity) per step; frequency changes of stored tests; and "
        "how many stored tests were replayed. Expect growth early, removals once history tests come back, "
        "and fewer additions as the coder improves (the paper's curves, in docs/algorithm.md).",
    ),
    FigureSpec(
        name="invalid_tests",
        title="Invalid generated tests by reason",
        panels=(PanelSpec("tests per step", ("tester/invalid/*", "tester/invalid_*", "tester/*rejected*")),),
        about="Generated tests that earn no validity credit, by the reason they were rejected. A reason "
        "that keeps growing shows what the Test LLM has not learned (or a parsing problem).",
    ),
    FigureSpec(
        name="timeouts",
        title="Sandbox timeouts and errors",
        panels=(
            PanelSpec(
                "fraction of executions", ("exec/timeout_rate*", "exec/*timeout*rate*", "exec/error_rate*")
            ),
            PanelSpec("count per step", ("exec/timeouts*", "exec/*timeout*", "exec/scoring_errors*")),
            PanelSpec(
                "executions per step", ("exec/verdicts*", "exec/pairs*", "exec/jobs*", "exec/programs*")
            ),
        ),
        about="Executions that hit the sandbox time budget or crashed, next to the number of code × test "
        "executions. Timeouts count as failures; a rising share means slow or looping code or tests.",
    ),
    FigureSpec(
        name="step_time",
        title="Time per step by phase",
        panels=(PanelSpec("seconds", PHASE_ORDER + ("time/*",), exclude=("time/step", "time/total")),),
        about="Wall-clock seconds of each phase, stacked per step; the black line is the whole step when "
        "logged. Shows where the time goes (rollouts, sandbox, updates).",
        kind="stacked",
        total_key="time/step",
    ),
    FigureSpec(
        name="generation",
        title="Generation: response length and truncation",
        panels=(
            PanelSpec("tokens per response", ("*/response_tokens*",)),
            PanelSpec("fraction truncated", ("*/truncated_rate*",), unit_range=True),
        ),
        about="Mean response length of each role and the share of responses cut at max_new_tokens. "
        "Responses that grow until they are cut waste compute and usually fail to parse.",
    ),
    FigureSpec(
        name="grpo_groups",
        title="Learning signal: GRPO groups and advantages",
        panels=(
            PanelSpec("groups per step", ("*/groups", "*/zero_variance_groups", "*/groups_selected")),
            PanelSpec("largest |advantage|", ("*/adv_abs_max",)),
        ),
        about="Groups (one per problem for the coder, per code for the tester) trained on, how many of them "
        "had all-equal rewards (zero advantage: no learning signal), and the largest advantage. A growing "
        "share of zero-variance groups means the task became too easy or too hard for the sample count.",
    ),
    FigureSpec(
        name="coder_losses",
        title="Code LLM update",
        panels=(PanelSpec("value", ("loss/coder/*",)),),
        about="One panel per statistic of the coder's policy update (loss, KL to the reference, clip "
        "fractions, importance ratios, optimizer steps).",
        kind="grid",
    ),
    FigureSpec(
        name="tester_losses",
        title="Test LLM update",
        panels=(PanelSpec("value", ("loss/tester/*",)),),
        about="The same statistics for the tester's update.",
        kind="grid",
    ),
    FigureSpec(
        name="evaluation",
        title="Evaluation during training",
        panels=(PanelSpec("score", ("eval/*",)),),
        about="Held-out evaluation results by step (from eval/ keys of metrics.jsonl or eval/*.json files "
        "that carry a step). With several runs, each metric has a figure of its own.",
        kind="grid",
        per_key_for_runs=True,
    ),
)
"""The figures of the report, in page order."""

NAMESPACES = ("coder", "tester", "exec", "replay", "loss", "time", "eval")
"""Namespaces whose leftover keys get an 'other metrics' figure (any other prefix does too)."""


@dataclass(frozen=True)
class PlannedFigure:
    """A figure that has data: its spec and, per panel, the keys it plots."""

    spec: FigureSpec
    panel_keys: tuple[tuple[str, ...], ...]
    runs_without_data: tuple[str, ...]
    """Names of runs that have none of the figure's keys."""
    total_key: str = ""
    """The spec's ``total_key`` when some run logged it, else ''."""

    @property
    def keys(self) -> list[str]:
        """Every key the figure draws, sorted."""
        return sorted({k for panel in self.panel_keys for k in panel} | ({self.total_key} - {""}))

    @property
    def file_name(self) -> str:
        """The PNG's file name."""
        return f"{self.spec.name}.png"


def match_keys(keys: Iterable[str], patterns: Iterable[str], exclude: Iterable[str] = ()) -> list[str]:
    """The keys matching any pattern and no exclude pattern, in the order of the patterns."""
    keys = list(keys)
    exclude = tuple(exclude)
    out: list[str] = []
    for pattern in patterns:
        for key in keys:
            if key not in out and fnmatch.fnmatchcase(key, pattern):
                if not any(fnmatch.fnmatchcase(key, ex) for ex in exclude):
                    out.append(key)
    return out


def plan_figures(
    run_keys: dict[str, set[str]], specs: tuple[FigureSpec, ...] = FIGURES
) -> tuple[list[PlannedFigure], list[FigureSpec]]:
    """Assign the keys present in the runs (run name → keys) to figures.

    Returns the figures with data (the table's, then one "other" figure per namespace with
    unclaimed keys) and the specs that had no data in any run.
    """
    all_keys = sorted(set().union(*run_keys.values())) if run_keys else []
    claimed: set[str] = set()
    planned: list[PlannedFigure] = []
    missing: list[FigureSpec] = []
    for spec in specs:
        panel_keys = []
        for panel in spec.panels:
            keys = match_keys([k for k in all_keys if k not in claimed], panel.patterns, panel.exclude)
            claimed.update(keys)
            panel_keys.append(tuple(keys))
        if not any(panel_keys):
            missing.append(spec)
            continue
        total = spec.total_key if spec.total_key in all_keys and spec.total_key not in claimed else ""
        if total:
            claimed.add(total)
        if spec.per_key_for_runs and len(run_keys) > 1:
            planned += [
                _planned(_one_key(spec, key), ((key,),), run_keys) for keys in panel_keys for key in keys
            ]
            continue
        planned.append(_planned(spec, tuple(panel_keys), run_keys, total))
    for namespace, keys in _leftovers(all_keys, claimed).items():
        spec = FigureSpec(
            name=f"other_{_safe(namespace)}",
            title=f"Other {namespace}/ metrics" if namespace else "Other metrics",
            panels=(PanelSpec("value", tuple(keys)),),
            about="Keys that no figure above claims, one panel each.",
            kind="grid",
        )
        planned.append(_planned(spec, (tuple(keys),), run_keys))
    return planned, missing


def _planned(
    spec: FigureSpec, panel_keys: tuple[tuple[str, ...], ...], run_keys: dict[str, set[str]], total: str = ""
) -> PlannedFigure:
    keys = {k for panel in panel_keys for k in panel} | ({total} - {""})
    without = tuple(name for name, present in run_keys.items() if not keys & present)
    return PlannedFigure(spec, panel_keys, without, total)


def _one_key(spec: FigureSpec, key: str) -> FigureSpec:
    """The figure of one key of a ``per_key_for_runs`` spec (``evaluation_coder_pass_1``)."""
    short = key.removeprefix("eval/")
    return FigureSpec(
        name=f"{spec.name}_{_safe(short)}",
        title=f"{spec.title}: {short}",
        panels=(PanelSpec(short, (key,)),),
        about=spec.about,
    )


def _leftovers(all_keys: list[str], claimed: set[str]) -> dict[str, list[str]]:
    """Unclaimed keys grouped by namespace (the part before the first ``/``; '' when there is none)."""
    groups: dict[str, list[str]] = {}
    for key in all_keys:
        if key not in claimed:
            namespace = key.split("/", 1)[0] if "/" in key else ""
            groups.setdefault(namespace, []).append(key)
    known = [ns for ns in NAMESPACES if ns in groups]
    return {ns: groups[ns] for ns in known + sorted(ns for ns in groups if ns not in NAMESPACES)}


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text) or "misc"
