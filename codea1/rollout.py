"""Rollouts of one training step: problems → coder completions → extracted code → tester
completions (docs/algorithm.md, steps 2–5).

Each phase is a separate function so the trainer can time it: :func:`coder_prompts`,
:func:`sample`, :func:`extract_codes`, :func:`tester_prompts`, then :func:`assemble` joins
everything into one :class:`Rollout`, and :func:`scoring_items` hands it to scoring (with the code
already extracted).

Decisions:

- a prompt longer than ``max_prompt_tokens`` is skipped (never truncated) and recorded with its
  reason in ``Rollout.skipped``; a skipped coder prompt drops the problem from the step;
- white-box view: one tester prompt per (problem, code). A code whose extraction failed gets **no**
  tester prompt: there is no code to show, and its reward is 0 anyway (an invalid code scores 0 and
  its suites' group would have zero variance, docs/algorithm.md item 10), so generating suites for
  it would only cost time. The code itself still trains the coder with reward 0;
- black-box view (self-play baseline): one tester prompt per problem with the question only; its
  ``n_t`` suites are shared by all the problem's codes;
- white-box view with ``tester.whitebox_share`` < 1 (docs/algorithm.md, deviation D14): only that
  share of the (problem, code) prompts show the code (:func:`whitebox_pairs`, a seeded draw per
  step); the others get the black-box prompt, still one per code, so groups, selection and scoring
  are those of the white-box view.

After scoring, :func:`coder_samples` and :func:`tester_samples` pair completions with rewards and GRPO
groups (the tester keeps only the top-spread groups), :func:`training_batch` turns them into one
role's engine batch with advantages, and :func:`sample_records` picks the samples saved per step.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from codea1.core.advantages import AdvantageStats, group_advantages
from codea1.core.selection import select_groups
from codea1.data.parsing import extract_code
from codea1.data.prompts import coder_messages, tester_messages
from codea1.engine.base import Completion, Policy, SamplingParams, TrainBatch
from codea1.scoring import ScoringItem
from codea1.types import CodeExtraction, Problem

Role = Literal["coder", "tester"]


@dataclass(frozen=True)
class Prompt:
    """One rendered prompt: for problem ``problem_index`` of the step and, for the tester in the
    white-box view, the code ``code_index`` it was written for (-1 otherwise). ``whitebox``: a
    tester prompt that shows the code."""

    problem_index: int
    code_index: int
    text: str
    whitebox: bool = False


@dataclass(frozen=True)
class SkippedPrompt:
    """A prompt that was not sampled, and why."""

    role: Role
    problem_id: str
    code_index: int
    reason: str


@dataclass(frozen=True)
class CodeSample:
    """One coder completion and the code extracted from it."""

    completion: Completion
    extraction: CodeExtraction


@dataclass(frozen=True)
class ProblemRollout:
    """Everything sampled for one problem.

    ``codes``: the ``n_c`` coder samples. ``suites[c]``: the tester completions that score code
    ``c`` (``n_t`` of them, or none when code ``c`` got no tester prompt). In the black-box view all
    codes share the same suites and ``shared_suites`` is True.
    """

    problem: Problem
    codes: tuple[CodeSample, ...]
    suites: tuple[tuple[Completion, ...], ...]
    shared_suites: bool = False


@dataclass(frozen=True)
class Rollout:
    """One step's rollouts, in problem order, plus the prompts that were skipped."""

    problems: tuple[ProblemRollout, ...]
    skipped: tuple[SkippedPrompt, ...] = ()


def _fits(policy: Policy, text: str, max_prompt_tokens: int) -> tuple[bool, str]:
    n = policy.count_tokens(text)
    if n > max_prompt_tokens:
        return False, f"prompt has {n} tokens > max_prompt_tokens={max_prompt_tokens}"
    return True, ""


def coder_prompts(
    problems: Sequence[Problem], policy: Policy, max_prompt_tokens: int
) -> tuple[list[Prompt], list[SkippedPrompt]]:
    """Render one coder prompt per problem; over-long ones are skipped with a reason."""
    prompts, skipped = [], []
    for i, problem in enumerate(problems):
        text = policy.render(coder_messages(problem))
        ok, why = _fits(policy, text, max_prompt_tokens)
        if ok:
            prompts.append(Prompt(i, -1, text))
        else:
            skipped.append(SkippedPrompt("coder", problem.id, -1, why))
    return prompts, skipped


def sample(policy: Policy, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
    """``params.n`` completions per prompt, grouped by prompt (empty input → no call)."""
    if not prompts:
        return []
    flat = policy.generate([p.text for p in prompts], params)
    groups: list[list[Completion]] = [[] for _ in prompts]
    for c in flat:
        groups[c.prompt_index].append(c)
    return groups


def extract_codes(
    problems: Sequence[Problem], prompts: Sequence[Prompt], groups: Sequence[Sequence[Completion]]
) -> list[list[CodeSample]]:
    """Extract the code of every coder completion (``CodeExtraction.code`` is None on failure);
    ``groups[j]`` holds the samples of ``prompts[j]``."""
    return [
        [CodeSample(c, extract_code(c.text, problems[p.problem_index].entry_point)) for c in group]
        for p, group in zip(prompts, groups, strict=True)
    ]


def whitebox_pairs(
    prompts: Sequence[Prompt], codes: Sequence[Sequence[CodeSample]], share: float, seed: int
) -> frozenset[tuple[int, int]]:
    """The (problem index, code index) pairs whose tester prompt shows the code: of the N extracted
    codes of the step, ``round(share × N)`` (halves up) drawn without replacement by
    ``random.Random(f"whitebox|{seed}")``, so the same seed (the step's tester sampling seed) gives
    the same pairs; all of them, with no draw, when ``share`` >= 1."""
    eligible = [
        (p.problem_index, c)
        for p, samples in zip(prompts, codes, strict=True)
        for c, s in enumerate(samples)
        if s.extraction.ok
    ]
    if share >= 1:
        return frozenset(eligible)
    return frozenset(
        random.Random(f"whitebox|{seed}").sample(eligible, math.floor(share * len(eligible) + 0.5))
    )


def tester_prompts(
    problems: Sequence[Problem],
    prompts: Sequence[Prompt],
    codes: Sequence[Sequence[CodeSample]],
    policy: Policy,
    *,
    view: Literal["whitebox", "blackbox"],
    tests_per_suite: int,
    max_prompt_tokens: int,
    whitebox_share: float = 1.0,
    seed: int = 0,
) -> tuple[list[Prompt], list[SkippedPrompt]]:
    """Tester prompts: per extracted code (white-box) or per problem (black-box).

    ``prompts[j]`` is the coder prompt whose samples are ``codes[j]``. White-box with
    ``whitebox_share`` < 1: the pairs :func:`whitebox_pairs` draws with ``seed`` show their code, the
    other extracted codes get the black-box prompt (one per code all the same).
    """
    shown = whitebox_pairs(prompts, codes, whitebox_share, seed) if view == "whitebox" else frozenset()
    out, skipped = [], []
    for prompt, samples in zip(prompts, codes, strict=True):
        problem = problems[prompt.problem_index]
        if view == "blackbox":
            pending = [(-1, False, tester_messages(problem, None, n_tests=tests_per_suite, view="blackbox"))]
        else:
            pending = []
            for c, s in enumerate(samples):
                if s.extraction.ok:
                    white = (prompt.problem_index, c) in shown
                    code_view = "whitebox" if white else "blackbox"
                    messages = tester_messages(
                        problem, s.extraction.code, n_tests=tests_per_suite, view=code_view
                    )
                    pending.append((c, white, messages))
        for code_index, white, messages in pending:
            text = policy.render(messages)
            ok, why = _fits(policy, text, max_prompt_tokens)
            if ok:
                out.append(Prompt(prompt.problem_index, code_index, text, white))
            else:
                skipped.append(SkippedPrompt("tester", problem.id, code_index, why))
    return out, skipped


def assemble(
    problems: Sequence[Problem],
    prompts: Sequence[Prompt],
    codes: Sequence[Sequence[CodeSample]],
    t_prompts: Sequence[Prompt],
    t_groups: Sequence[Sequence[Completion]],
    skipped: Sequence[SkippedPrompt],
) -> Rollout:
    """Join coder and tester samples into one :class:`Rollout` (problems in step order)."""
    by_problem: dict[int, dict[int, tuple[Completion, ...]]] = {}
    for tp, group in zip(t_prompts, t_groups, strict=True):
        by_problem.setdefault(tp.problem_index, {})[tp.code_index] = tuple(group)
    out = []
    for prompt, samples in zip(prompts, codes, strict=True):
        suites_of = by_problem.get(prompt.problem_index, {})
        shared = -1 in suites_of
        suites = tuple(suites_of.get(-1 if shared else c, ()) for c in range(len(samples)))
        out.append(ProblemRollout(problems[prompt.problem_index], tuple(samples), suites, shared))
    return Rollout(tuple(out), tuple(skipped))


def scoring_items(rollout: Rollout) -> list[ScoringItem]:
    """The step's problems as scoring inputs: every code's text with the code
    :func:`extract_codes` already found in it (extracted once per step), and its suites' texts."""
    return [
        ScoringItem(
            pr.problem,
            tuple(c.completion.text for c in pr.codes),
            tuple(tuple(s.text for s in su) for su in pr.suites),
            tuple(c.extraction for c in pr.codes),
        )
        for pr in rollout.problems
    ]


@dataclass(frozen=True)
class ScoredSample:
    """A completion with its scalar reward, its GRPO group and where it came from.

    ``source`` is ``(problem index, code index, suite index)``; the suite index is -1 for code.
    """

    completion: Completion
    reward: float
    group: Hashable
    source: tuple[int, int, int]


@dataclass
class RoleBatch:
    """One role's training samples: the engine batch and, aligned with it, what metrics and the
    sample dumps need. Completions with no tokens are kept out (nothing to train on)."""

    train: TrainBatch
    sampling_logprobs: list[tuple[float, ...]]
    rewards: list[float]
    sources: list[tuple[int, int, int]]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.train)

    def merge(self, other: RoleBatch) -> RoleBatch:
        """Both batches as one (a shared model updates on its two roles' samples at once)."""
        return RoleBatch(
            TrainBatch.concat([self.train, other.train]),
            self.sampling_logprobs + other.sampling_logprobs,
            self.rewards + other.rewards,
            self.sources + other.sources,
            self.texts + other.texts,
        )


def training_batch(
    samples: Sequence[ScoredSample], *, norm_by_std: bool = True, eps: float = 1e-6
) -> tuple[RoleBatch, AdvantageStats]:
    """GRPO advantages over the samples' groups, then the engine batch of the non-empty ones."""
    adv, stats = group_advantages(
        [s.reward for s in samples], [s.group for s in samples], norm_by_std=norm_by_std, eps=eps
    )
    keep = [i for i, s in enumerate(samples) if s.completion.completion_ids]
    cs = [samples[i].completion for i in keep]
    train = TrainBatch(
        [c.prompt_ids for c in cs], [c.completion_ids for c in cs], [float(adv[i]) for i in keep]
    )
    batch = RoleBatch(
        train,
        [c.logprobs for c in cs],
        [samples[i].reward for i in keep],
        [samples[i].source for i in keep],
        [c.text for c in cs],
    )
    return batch, stats


def coder_samples(rollout: Rollout, scores: Sequence[Any]) -> list[ScoredSample]:
    """Every code sample with its reward R_C; group = its problem (docs/algorithm.md, step 6)."""
    return [
        ScoredSample(c.completion, float(score.code_rewards[ci]), ("coder", pi), (pi, ci, -1))
        for pi, (pr, score) in enumerate(zip(rollout.problems, scores, strict=True))
        for ci, c in enumerate(pr.codes)
    ]


def tester_samples(
    rollout: Rollout, scores: Sequence[Any], update_n: int
) -> tuple[list[ScoredSample], list[list[int]]]:
    """The suites that train the tester, and the selected code indices per problem.

    White-box: group = the n_t suites of one code; per problem only the ``update_n`` codes with the
    largest reward spread are kept (docs/algorithm.md, step 8); codes without suites never compete. Black-box
    (shared suites): one group per problem, a suite's reward is its mean R_T over the codes it scored.
    A rollout without suites (golden: no Test LLM) gives none.
    """
    out: list[ScoredSample] = []
    selected: list[list[int]] = []
    for pi, (pr, score) in enumerate(zip(rollout.problems, scores, strict=True)):
        with_suites = [ci for ci, su in enumerate(pr.suites) if su]
        if not with_suites:
            selected.append([])
            continue
        if pr.shared_suites:
            per_code = np.array([score.suite_rewards[ci] for ci in with_suites], dtype=np.float64)
            for k, comp in enumerate(pr.suites[with_suites[0]]):
                out.append(ScoredSample(comp, float(per_code[:, k].mean()), ("tester", pi), (pi, -1, k)))
            selected.append(with_suites)
            continue
        rows = [score.suite_rewards[ci] for ci in with_suites]
        keep = [with_suites[j] for j in select_groups(rows, update_n)]
        selected.append(keep)
        for ci in keep:
            for k, comp in enumerate(pr.suites[ci]):
                out.append(
                    ScoredSample(comp, float(score.suite_rewards[ci][k]), ("tester", pi, ci), (pi, ci, k))
                )
    return out, selected


def sample_records(rollout: Rollout, batch: RoleBatch, role: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` trained samples of a role, spread over problems first (for samples/*.jsonl)."""
    order = sorted(range(len(batch)), key=lambda i: (batch.sources[i][1:], batch.sources[i][0]))[:limit]
    out = []
    for i in order:
        pi, ci, k = batch.sources[i]
        out.append({
            "role": role, "problem_id": rollout.problems[pi].problem.id, "code_index": ci, "suite_index": k,
            "reward": batch.rewards[i], "advantage": batch.train.advantages[i], "text": batch.texts[i],
        })  # fmt: skip
    return out
