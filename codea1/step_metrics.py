"""The metrics of one training step: the ``coder/``, ``tester/``, ``exec/``, ``replay/``, ``rollout/``
and ``memory/`` keys of ``metrics.jsonl``, as docs/metrics.md lists them, and the ``loss/<role>/``
keys of a policy update (:func:`update_metrics`, from the learners' stats; ``time/`` keys come from
the tracker).

The trainer calls :func:`sampling_metrics` right after each role's rollout (it reads the policy's
``last_stats`` of that call) and :func:`step_metrics` once the step's batches are built. A method
without a Test LLM (golden) logs no ``tester/`` keys, and a run without a Mistake Book (golden, or
the book switched off) no ``replay/`` keys, so plots show absent series rather than misleading zeros.

Imports: rollout, scoring, core.advantages, engine.base, replay.mistake_book, types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from codea1.core.advantages import AdvantageStats
from codea1.core.reward_terms import TERMS, TESTER_TERMS
from codea1.engine.base import Completion, Policy
from codea1.replay.mistake_book import StepReport
from codea1.rollout import Prompt, RoleBatch, Rollout
from codea1.scoring import GoldenScore, ProblemScore, Score
from codea1.types import TestCase


@dataclass(frozen=True)
class TrainedRole:
    """What one role trains on this step: its batch and the GRPO statistics of its groups."""

    batch: RoleBatch
    advantages: AdvantageStats


def _mean(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if len(xs) else 0.0


def sampling_metrics(role: str, policy: Policy, groups: Sequence[Sequence[Completion]]) -> dict[str, float]:
    """Rollout throughput of one role: ``rollout/<role>/tokens_per_s`` (the policy's last
    ``generate``, so call it right after the role's rollout) and the engine that sampled, as
    ``rollout/engine/<name>`` = 1."""
    out = {f"rollout/engine/{policy.name}": 1.0}
    if groups and "tokens_per_s" in policy.last_stats:
        out[f"rollout/{role}/tokens_per_s"] = float(policy.last_stats["tokens_per_s"])
    return out


def tester_prompt_metrics(prompts: Sequence[Prompt]) -> dict[str, float]:
    """``tester/whitebox_prompt_rate``: the share of the step's tester prompts that showed the code
    (1 in Code-A1's white-box view, 0 in the black-box view, about ``tester.whitebox_share`` in
    between); nothing when there was no tester prompt."""
    return {"tester/whitebox_prompt_rate": _mean([float(p.whitebox) for p in prompts])} if prompts else {}


def sync_metrics(role: str, policy: Policy) -> dict[str, float]:
    """Weight-sync cost of one role's last push to its rollout engine, ``rollout/<role>/sync_seconds``
    and ``…/sync_bytes``, when the engine reports it (vLLM and Ray policies do)."""
    stats = policy.last_stats
    return {f"rollout/{role}/{k}": float(stats[k]) for k in ("sync_seconds", "sync_bytes") if k in stats}


def memory_metrics() -> dict[str, float]:
    """``memory/peak_rss_gib``: the largest resident set this process has had so far, in GiB (the
    trainer with its in-process learners and CPU vLLM engine; not the sandbox workers or Ray actors,
    which are processes of their own). Linux reports ``ru_maxrss`` in KiB. On CUDA also
    :func:`gpu_memory_metrics`."""
    import resource

    return {"memory/peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20} | (
        gpu_memory_metrics()
    )


def gpu_memory_metrics() -> dict[str, float]:
    """``memory/peak_gpu_gib`` and ``memory/peak_gpu_reserved_gib``: the most this process's CUDA
    caching allocator had allocated (tensors) and reserved (tensors and cached blocks) since the
    previous call, in GiB, the largest over its devices; the peaks are reset after reading, so each
    step's call gives that step's peak. Nothing when this process has not initialised CUDA (a CPU
    run, the Ray backend's driver), and torch is not imported for it."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    allocated = reserved = 0
    for index in range(torch.cuda.device_count()):
        allocated = max(allocated, torch.cuda.max_memory_allocated(index))
        reserved = max(reserved, torch.cuda.max_memory_reserved(index))
        torch.cuda.reset_peak_memory_stats(index)
    return {"memory/peak_gpu_gib": allocated / 2**30, "memory/peak_gpu_reserved_gib": reserved / 2**30}


def step_metrics(
    rollout: Rollout,
    scores: Sequence[Score],
    *,
    history: Mapping[str, Sequence[TestCase]],
    report: StepReport,
    book_size: int | None,
    coder: TrainedRole,
    tester: TrainedRole | None,
    groups_selected: Sequence[Sequence[int]] = (),
) -> dict[str, float]:
    """Every ``coder/``, ``tester/``, ``exec/`` and ``replay/`` key of one step.

    ``tester`` None: the method has no Test LLM (no ``tester/`` keys); ``book_size`` None: no
    Mistake Book (no ``replay/`` keys). ``groups_selected`` holds the code indices per problem whose
    suites train the tester.
    """
    m = completion_metrics(rollout, with_tester=tester is not None)
    m |= score_metrics(scores)
    if book_size is not None:
        m |= replay_metrics(history, report, book_size)
    m |= trained_metrics("coder", coder)
    if tester is not None:
        m |= trained_metrics("tester", tester)
        m["tester/groups_selected"] = float(sum(len(s) for s in groups_selected))
    return m


def _completions(role: str, comps: Sequence[Completion]) -> dict[str, float]:
    return {
        f"{role}/samples": float(len(comps)),
        f"{role}/response_tokens_mean": _mean([len(c.completion_ids) for c in comps]),
        f"{role}/truncated_rate": _mean([0.0 if c.finished else 1.0 for c in comps]),
    }


def completion_metrics(rollout: Rollout, *, with_tester: bool) -> dict[str, float]:
    """What was sampled: completions, their length and truncation per role, skipped prompts, and
    the share of code completions code could be extracted from. Suites shared by all the codes of a
    problem (black-box) count once."""
    codes = [c for pr in rollout.problems for c in pr.codes]
    m = _completions("coder", [c.completion for c in codes])
    if with_tester:
        suites = [s for pr in rollout.problems for su in {id(x): x for x in pr.suites}.values() for s in su]
        m |= _completions("tester", suites)
        m["tester/skipped_prompts"] = float(sum(s.role == "tester" for s in rollout.skipped))
    m["coder/extract_ok_rate"] = _mean([1.0 if c.extraction.ok else 0.0 for c in codes])
    m["coder/problems"] = float(len(rollout.problems))
    m["coder/skipped_prompts"] = float(sum(s.role == "coder" for s in rollout.skipped))
    return m


def score_metrics(scores: Sequence[Score]) -> dict[str, float]:
    """Rewards and the sandbox grid: R_C over every code; for Code-A1 and self-play
    (:class:`ProblemScore`) R_T and its terms, generated and Mistake-Book pass rates; for golden
    (:class:`GoldenScore`) the golden pass rate; verdict counts and failure rates."""
    rewards = [r for s in scores for r in s.code_rewards]
    m = {
        "coder/reward_mean": _mean(rewards),
        "coder/reward_std": float(np.std(rewards)) if rewards else 0.0,
        "exec/scoring_errors": float(sum(bool(s.error) for s in scores)),
    }
    problem_scores = [s for s in scores if isinstance(s, ProblemScore)]
    if problem_scores:  # Code-A1 and self-play: R_T and its terms
        breakdowns = [b for s in problem_scores for b in s.breakdowns]
        suite_r = [x for b in breakdowns for x in b.suites]
        hist = [b for b in breakdowns if b.history_total]
        m |= {
            "tester/reward_mean": _mean([x.reward for x in suite_r]),
            "tester/reward_std": float(np.std([x.reward for x in suite_r])) if suite_r else 0.0,
            "tester/validity_mean": _mean([x.validity for x in suite_r]),
            "tester/adversarial_mean": _mean([x.adversarial for x in suite_r]),
            "tester/valid_tests_mean": _mean([x.n_valid for x in suite_r]),
            "tester/invalid_tests_mean": _mean([x.n_invalid for x in suite_r]),
            "exec/code_valid_rate": _mean([1.0 if b.valid else 0.0 for b in breakdowns]),
            "exec/gen_pass_rate": _mean([x.pass_rate for x in suite_r if x.n_valid]),
            "exec/history_pass_rate": _mean([b.history_pass_rate for b in hist]),
            "exec/codes_with_history": float(len(hist)),
        }
        reasons = sorted({r for x in suite_r for r in x.invalid_by_reason})
        m |= {f"tester/invalid/{r}": _mean([x.invalid_by_reason.get(r, 0) for x in suite_r]) for r in reasons}
        for term in TESTER_TERMS:  # the terms that were on: their own keys (core.reward_terms)
            rows = [x.terms[term.name] for x in suite_r if term.name in x.terms]
            if rows:
                stats = [s.term_stats[term.name] for s in problem_scores if term.name in s.term_stats]
                m |= term.metrics(rows, stats)
    else:  # golden tests
        golden = [s for s in scores if isinstance(s, GoldenScore)]
        m["exec/code_valid_rate"] = _mean([float(v) for s in golden for v in s.code_valid])
        m |= TERMS["golden"].metrics([{"value": r} for r in rewards], [])
    grids = [s.grid for s in problem_scores if s.grid is not None]
    verdicts = [v.status for g in grids for row in g.verdicts for v in row]
    m["exec/verdicts"] = float(len(verdicts))
    m["exec/timeout_rate"] = _mean([1.0 if v == "timeout" else 0.0 for v in verdicts])
    m["exec/error_rate"] = _mean([1.0 if v == "error" else 0.0 for v in verdicts])
    return m


def replay_metrics(
    history: Mapping[str, Sequence[TestCase]], report: StepReport, book_size: int
) -> dict[str, float]:
    """The Mistake Book: tests replayed, problems that had some, the step's commit and the size after."""
    m = {
        "replay/tests_retrieved": float(sum(len(v) for v in history.values())),
        "replay/problems_hit": float(sum(1 for v in history.values() if v)),
    }
    m |= {f"replay/{k}": float(v) for k, v in report.to_dict().items() if k != "step"}
    m["replay/book_size"] = float(book_size)
    return m


def trained_metrics(role: str, trained: TrainedRole) -> dict[str, float]:
    """What the role trains on: sample count, mean reward, groups, zero-variance groups, advantage spread."""
    batch, stats = trained.batch, trained.advantages
    return {
        f"{role}/trained_samples": float(len(batch)),
        f"{role}/trained_reward_mean": _mean(batch.rewards),
        f"{role}/groups": float(stats.n_groups),
        f"{role}/zero_variance_groups": float(stats.n_zero_variance_groups),
        f"{role}/zero_variance_fraction": stats.n_zero_variance_groups / stats.n_groups
        if stats.n_groups
        else 0.0,
        f"{role}/adv_abs_max": stats.adv_abs_max,
    }


def update_metrics(
    role: str, sums: Mapping[str, float], steps: int, *, skipped_without_signal: bool = False
) -> dict[str, float]:
    """A role's policy update as ``loss/<role>/…`` keys: the learner's stats of its ``steps``
    optimizer steps (``sums``, added up over the steps; a ``loss/`` prefix dropped) averaged, then
    ``optimizer_steps``; with nothing to train, 0 steps (and ``skipped_without_signal`` when a batch
    without any advantage was skipped)."""
    out = {f"loss/{role}/{k.removeprefix('loss/')}": v / steps for k, v in sums.items()}
    out[f"loss/{role}/optimizer_steps"] = float(steps)
    if skipped_without_signal:
        out[f"loss/{role}/skipped_without_signal"] = 1.0
    return out
