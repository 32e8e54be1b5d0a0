"""``codea1.step_metrics``: each method family's score type read by its declared fields, the series
a method without a Test LLM or a run without a Mistake Book leaves out, and every key it writes
documented in docs/metrics.md."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path

import pytest

from codea1 import rollout as ro
from codea1.config import RewardConfig, load_config
from codea1.engine.base import Completion, SamplingParams
from codea1.engine.scripted import ScriptedPolicy
from codea1.replay.mistake_book import StepReport
from codea1.scoring import ScoringItem, score_batch, score_golden
from codea1.step_metrics import (
    TrainedRole,
    completion_metrics,
    gpu_memory_metrics,
    memory_metrics,
    sampling_metrics,
    step_metrics,
    trained_metrics,
)
from codea1.types import CodeExtraction, ExecGrid, GridJob, Problem, TestCase

PROBLEM = Problem("p", "Return 1.", "f", "def f():\n    return 1\n", golden_tests=("assert f() == 1",))
METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


class NoJobsExpected:
    """A grid runner for batches without any code to run: being called is a test failure."""

    def run_grids(self, jobs: Sequence[GridJob], *, rel_tol: float, abs_tol: float) -> list[ExecGrid]:
        raise AssertionError(f"no job should reach the sandbox, got {len(jobs)}")


def completion(text: str, finished: bool = True) -> Completion:
    ids = tuple(text.encode())
    return Completion(0, text, (1, 2), ids, (-1.0,) * len(ids), finished)


def nothing_trained() -> TrainedRole:
    return TrainedRole(*ro.training_batch([]))


def a1_step(book_size: int | None) -> dict[str, float]:
    rollout = ro.Rollout((ro.ProblemRollout(PROBLEM, (), ()),))
    scores = score_batch([ScoringItem(PROBLEM, (), ())], NoJobsExpected(), reward=RewardConfig())
    history = {"p": [TestCase("f()", "1")]}
    return step_metrics(
        rollout, scores, history=history, report=StepReport(1, added=2), book_size=book_size,
        coder=nothing_trained(), tester=nothing_trained(), groups_selected=[[]],
    )  # fmt: skip


def golden_step() -> dict[str, float]:
    rollout = ro.Rollout((ro.ProblemRollout(PROBLEM, (), ()),))
    scores = score_golden([ScoringItem(PROBLEM, (), ())], NoJobsExpected())
    return step_metrics(
        rollout, scores, history={}, report=StepReport(1), book_size=None,
        coder=nothing_trained(), tester=None,
    )  # fmt: skip


def test_a1_step_whose_problem_has_no_code_reports_tester_series_not_golden_ones() -> None:
    m = a1_step(book_size=0)
    assert m["tester/reward_mean"] == 0.0 and m["exec/code_valid_rate"] == 0.0
    assert m["exec/verdicts"] == 0.0 and "exec/golden_pass_rate" not in m
    assert m["replay/tests_retrieved"] == 1.0 and m["replay/added"] == 2.0 and m["replay/book_size"] == 0.0
    assert m["tester/groups_selected"] == 0.0 and m["tester/trained_samples"] == 0.0


def test_a1_step_without_a_mistake_book_logs_no_replay_series() -> None:
    m = a1_step(book_size=None)
    assert not [k for k in m if k.startswith("replay/")] and "tester/reward_mean" in m


def test_golden_step_reports_golden_series_and_no_tester_ones() -> None:
    m = golden_step()
    assert m["exec/golden_pass_rate"] == 0.0 and m["exec/code_valid_rate"] == 0.0
    assert not [k for k in m if k.startswith(("tester/", "replay/"))]


def test_completion_metrics_count_shared_suites_once() -> None:
    codes = (
        ro.CodeSample(completion("abcd"), CodeExtraction("x = 1")),
        ro.CodeSample(completion("ab", finished=False), CodeExtraction(None, "no code")),
    )
    suites = (completion("s1"), completion("s22"))
    shared = ro.ProblemRollout(PROBLEM, codes, (suites, suites), shared_suites=True)
    skipped = (ro.SkippedPrompt("tester", "q", 0, "long"), ro.SkippedPrompt("coder", "q", -1, "long"))
    m = completion_metrics(ro.Rollout((shared,), skipped), with_tester=True)
    assert m["coder/samples"] == 2 and m["coder/response_tokens_mean"] == 3
    assert m["coder/truncated_rate"] == 0.5
    assert m["coder/extract_ok_rate"] == 0.5 and m["coder/problems"] == 1
    assert m["tester/samples"] == 2 and m["tester/response_tokens_mean"] == 2.5  # not 4: shared
    assert m["coder/skipped_prompts"] == 1 and m["tester/skipped_prompts"] == 1
    assert not [k for k in completion_metrics(ro.Rollout((shared,)), with_tester=False) if "tester" in k]


def test_trained_metrics_describe_the_batch_and_its_groups() -> None:
    rewards = [("g1", 1.0), ("g1", 0.0), ("g2", 0.5), ("g2", 0.5)]
    samples = [ro.ScoredSample(completion("ab"), r, g, (0, i, -1)) for i, (g, r) in enumerate(rewards)]
    m = trained_metrics("coder", TrainedRole(*ro.training_batch(samples)))
    assert m["coder/trained_samples"] == 4 and m["coder/trained_reward_mean"] == 0.5
    assert m["coder/groups"] == 2 and m["coder/zero_variance_groups"] == 1
    assert m["coder/zero_variance_fraction"] == 0.5
    assert m["coder/adv_abs_max"] == pytest.approx(0.5**0.5, abs=1e-5)  # (1 - 0.5) / sample std
    assert trained_metrics("tester", nothing_trained())["tester/zero_variance_fraction"] == 0.0


def test_sampling_metrics_name_the_engine_and_its_speed_when_measured() -> None:
    policy = ScriptedPolicy(["x"])
    groups = ro.sample(policy, [ro.Prompt(0, -1, "p")], SamplingParams(n=2))
    assert sampling_metrics("coder", policy, groups) == {"rollout/engine/scripted": 1.0}  # not timed
    policy.last_stats = {"tokens_per_s": 12.0}
    assert sampling_metrics("tester", policy, groups) == {
        "rollout/engine/scripted": 1.0,
        "rollout/tester/tokens_per_s": 12.0,
    }
    assert "rollout/tester/tokens_per_s" not in sampling_metrics("tester", policy, [])  # nothing sampled


def documented_keys() -> list[re.Pattern[str]]:
    """The keys docs/metrics.md lists, as patterns (``<reason>``, ``<name>``: one path part)."""
    keys = re.findall(r"`([a-z_]+/[a-z_/<>]+)`", METRICS_DOC.read_text())
    return [re.compile(re.sub(r"<[a-z]+>", "[^/]+", k) + "$") for k in keys]


def test_every_key_written_is_documented() -> None:
    policy = ScriptedPolicy(["x"])
    policy.last_stats = {"tokens_per_s": 1.0}
    keys = set(a1_step(book_size=3)) | set(golden_step()) | set(sampling_metrics("coder", policy, [[]]))
    keys |= {"tester/invalid/syntax"} | set(memory_metrics()) | set(FakeCuda.keys())
    patterns = documented_keys()
    assert [k for k in sorted(keys) if not any(p.match(k) for p in patterns)] == []


@pytest.mark.parametrize(("method", "trains"), [("a1", True), ("selfplay", True), ("golden", False)])
def test_trains_tester_is_false_only_for_golden(method: str, trains: bool) -> None:
    extra = ["tester.view=blackbox"] if method == "selfplay" else []
    assert load_config("tiny-cpu", [f"train.method={method}", *extra]).train.trains_tester is trains


class FakeCuda:
    """``torch.cuda`` of a process with two initialised devices whose allocator peaks are set."""

    GIB = 2**30

    def __init__(self) -> None:
        self.allocated = [2 * self.GIB, 3 * self.GIB]
        self.reserved = [4 * self.GIB, 1 * self.GIB]

    @staticmethod
    def keys() -> dict[str, float]:
        return {"memory/peak_gpu_gib": 0.0, "memory/peak_gpu_reserved_gib": 0.0}

    def is_initialized(self) -> bool:
        return True

    def device_count(self) -> int:
        return 2

    def max_memory_allocated(self, index: int) -> int:
        return self.allocated[index]

    def max_memory_reserved(self, index: int) -> int:
        return self.reserved[index]

    def reset_peak_memory_stats(self, index: int) -> None:
        self.allocated[index] = self.reserved[index] = 0


def test_gpu_memory_is_each_steps_peak_over_the_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    first = memory_metrics()
    assert first["memory/peak_gpu_gib"] == 3.0 and first["memory/peak_gpu_reserved_gib"] == 4.0
    assert first["memory/peak_rss_gib"] > 0
    cuda.allocated[0] = FakeCuda.GIB // 2  # the next step's peak, after the reset
    assert gpu_memory_metrics() == {"memory/peak_gpu_gib": 0.5, "memory/peak_gpu_reserved_gib": 0.0}


def test_no_gpu_memory_keys_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    no_cuda = types.SimpleNamespace(is_initialized=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=no_cuda))
    assert gpu_memory_metrics() == {} and set(memory_metrics()) == {"memory/peak_rss_gib"}
