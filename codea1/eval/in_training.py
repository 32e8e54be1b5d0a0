"""Evaluation inside a training run: the coder's pass@k and the tester's validity and mutation
score on held-out problems, at step 0 (before the first update), every ``eval.every`` steps and at
the last step, through the rollout engine the run already holds (no extra model copy).

Each point is exactly an ``eval code`` (and an ``eval tests``) run: the same benchmark loading,
reference budgets, chunking, seeds and results-file format, so with the same engine and settings
the step-0 numbers equal ``codea1 eval code`` / ``eval tests`` on the base model sample for
sample. Every point's seed is ``eval.seed``, the same at every step: sample ``j`` of problem ``i``
is drawn with the same seed at every point (and in every run with the same settings), so points
are paired. Per-problem results go to ``<run dir>/eval/step_NNNNNN/`` and resume like any
evaluation: a point that was computed before a crash is read back, not sampled again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codea1.config import EvalConfig
from codea1.core.estimators import ks_for
from codea1.engine.base import Policy, SamplingParams
from codea1.eval import runner
from codea1.eval.code_eval import code_checker, sample_completions, sampling_settings, summarize_code
from codea1.eval.suite_eval import sample_suites, suites_checker, summarize_tests
from codea1.tracking import step_file_name
from codea1.types import Problem

EVAL_DIR = "eval"
"""Where a run keeps its evaluation points: ``eval/step_NNNNNN/{code,tests}-*.jsonl``."""


def due(step: int, every: int, last_step: int) -> bool:
    """Whether step ``step`` is an evaluation point: step 0, each multiple of ``every`` (when > 0),
    and the last step."""
    return step == 0 or step == last_step or (every > 0 and step % every == 0)


@dataclass
class InRunEvaluator:
    """Evaluates the policies of a run on held-out problems (``cfg.data``), one step at a time."""

    cfg: EvalConfig
    run_dir: Path
    model_id: str
    """What the coder's results files' run keys name: its base model spec (the step is in the
    directory)."""
    tester_model_id: str
    """The same for the tester's results files."""
    workers: int = 0
    say: Callable[[str], None] = lambda msg: None

    def __post_init__(self) -> None:
        self.problems: list[Problem] = runner.load_benchmark(self.cfg.data, self.cfg.limit, self.say)
        runner.require_harness(self.problems, "the in-run evaluation checks every sample with it")

    def options(self, step: int) -> runner.RunOptions:
        """The runner's options of one point (its results directory)."""
        return runner.RunOptions(
            self.run_dir / EVAL_DIR / step_file_name(step), workers=self.workers,
            memory_mb=self.cfg.memory_mb, chunk=self.cfg.chunk,
        )  # fmt: skip

    def sampling(self, n: int) -> SamplingParams:
        """The sampling parameters of every point (the same seed at every step: points are paired)."""
        c = self.cfg
        return SamplingParams(n=n, temperature=c.temperature, top_p=c.top_p, max_new_tokens=c.max_new_tokens,
                              seed=c.seed)  # fmt: skip

    def coder(self, step: int, policy: Policy) -> dict[str, float]:
        """``eval/coder/pass@k`` and ``avg@k`` (percent) of ``policy`` at ``step``."""
        c = self.cfg
        params = self.sampling(c.n)

        def prepare() -> runner.CheckChunk:
            return code_checker(lambda chunk: sample_completions(policy, chunk, params))

        records, _ = runner.run_resumable(
            self.problems,
            "code",
            self.model_id,
            sampling_settings(params),
            self.options(step),
            prepare,
            self.say,
        )
        return _flatten("eval/coder", _overall(summarize_code(records, ks_for(c.n))))

    def tester(self, step: int, policy: Policy, view: str) -> dict[str, float]:
        """``eval/tester/validity``, ``pass@k`` and ``mut@k`` (percent) of one suite of ``eval.tests``
        tests per problem: validity against the reference, and the fraction of the reference's
        mutants (the wrong codes ``eval tests`` makes) that its valid tests catch."""
        c = self.cfg
        settings = {"k": c.tests, "blackbox": view == "blackbox", "mutants": c.max_mutants, "coder": ""}
        params = self.sampling(1)

        def prepare() -> runner.CheckChunk:
            return suites_checker(lambda chunk: sample_suites(policy, chunk, params, c.tests, view), None,
                                  k=c.tests, max_mutants=c.max_mutants)  # fmt: skip

        records, _ = runner.run_resumable(
            self.problems, "tests", self.tester_model_id, settings, self.options(step), prepare, self.say
        )
        summary = _overall(summarize_tests(records, c.tests))
        keep = ("validity", f"pass@{c.tests}", f"mut@{c.tests}", "Mul", "line_cov", "branch_cov")
        return _flatten("eval/tester", {k: summary[k] for k in keep if k in summary})


def _overall(summary: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
    """The row over every problem: ``all`` when the problems come from several benchmarks."""
    return summary["all"] if "all" in summary else next(iter(summary.values()))


def _flatten(prefix: str, metrics: Mapping[str, Any]) -> dict[str, float]:
    return {f"{prefix}/{k}": float(v) for k, v in metrics.items() if k != "problems"}
