"""The largest sizes accepted for what a user can set: group sizes, batches, tokens, tests, workers, steps.

A size past these bounds is not a bigger run but a runaway one (``coder.sampling.n=10**12`` grows
until the kernel kills the process), so it is refused when the configuration or the command line
is checked, before anything is started or created. Each bound is far above what the paper uses
(docs/algorithm.md: groups of 8, 4,096 new tokens, 8 tests a suite, 256 problems a step). The
worker bound is the machine's: a sandbox worker is a process tree with its own cgroups, and more
than a few per core only thrash.

This module holds the bounds (by the configuration's dotted keys) and the messages; the
configuration reads its own values for them (``config.check_invariants``), so nothing here
imports the configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

MAX_GROUP_SIZE = 256
"""Completions per prompt (``sampling.n``, ``eval --m``): the GRPO group size (8 in the paper)."""
MAX_EVAL_SAMPLES = 1024
"""Code samples per problem of an evaluation (``eval.n``, ``eval --n``; pass@k needs n >= k)."""
MAX_BATCH = 4096
"""Sequences per generation batch or per forward/backward pass (``batch_size``, ``micro_batch_size``)."""
MAX_MICRO_BATCH_TOKENS = 1 << 24
"""Tokens of one forward/backward pass (``optim.micro_batch_tokens``; 32,768 in the paper presets)."""
MAX_OPTIMIZER_STEPS = 1024
"""``optim.mini_batches`` and ``optim.ppo_epochs`` (1 to 2 in the paper)."""
MAX_TOKENS = 1 << 17
"""Tokens of a prompt or a completion (131,072: the longest context of the supported models)."""
MAX_TESTS_PER_SUITE = 64
"""Asserts a tester prompt asks for (``tester.tests_per_suite``, ``eval --tests-per-suite``)."""
MAX_TESTS_CONSIDERED = 1024
"""Tests taken from a suite or from the Mistake Book (``eval.tests``, ``eval --k``, ``mistake_book.top_k``)."""
MAX_PROBLEMS_PER_STEP = 1 << 16
"""``data.problems_per_step`` (256 in the paper); the data set bounds it too."""
MAX_COMPLETIONS_PER_STEP = 1 << 20
"""Completions one training step samples: problems x coder n x (1 + tester n) (18,432 in the paper)."""
MAX_CHUNK = 1 << 16
"""Problems per sampling/checking round of an evaluation (``eval.chunk``, ``eval --chunk``)."""
MAX_MUTANTS = 10_000
"""Mutants of the reference per problem (``eval.max_mutants``, ``eval --max-mutants``,
``reward.mutation_mutants``)."""
MAX_JOBS_PER_CALL = 1 << 16
"""Grid jobs per sandbox call (``sandbox run --batch``)."""
MAX_SANDBOX_MEMORY_MB = 1 << 20
"""Address-space limit of a sandboxed program, MiB (``--memory-mb``, ``eval.memory_mb``): 1 TiB."""
MAX_RESAMPLES = 1_000_000
"""Bootstrap resamples of ``compare`` and ``eval compare`` (``--resamples``; 10,000 by default). A
million already pins a 95 % interval's ends to well under 0.1 point; more only allocates: each
resample is a row of problem indices, 8 bytes each."""
MAX_SEED = 2**63 - 1
"""Seeds a user gives (``--seed``): non-negative and below 2**63, what every generator the seeds
reach (numpy, torch, vLLM) accepts."""
WORKERS_PER_CORE = 4
"""Sandbox workers allowed per CPU core of this machine."""
MAX_WORKERS = 1024
"""Sandbox workers on any machine (the Ray fan-out's nodes have their own cores)."""
MAX_TRAIN_STEPS = 1 << 20
"""Training steps of a run (``train.steps``, ``--steps``) and the evaluation's period (``eval.every``;
111 steps in the paper)."""


def cores() -> int:
    """CPU cores of this machine (``os.cpu_count``, at least 1)."""
    return os.cpu_count() or 1


def max_workers() -> int:
    """Largest sandbox worker count on this machine: :data:`WORKERS_PER_CORE` per core."""
    return min(MAX_WORKERS, WORKERS_PER_CORE * cores())


def above(key: str, value: int, maximum: int, what: str = "") -> str | None:
    """The message for ``key=value`` past ``maximum`` (None when it is within)."""
    if value <= maximum:
        return None
    return f"{key}={value} exceeds the maximum {maximum}" + (f" ({what})" if what else "")


ROLE_SIZE_BOUNDS: dict[str, tuple[int, str]] = {
    "sampling.n": (MAX_GROUP_SIZE, "completions per prompt; 8 in the paper"),
    "sampling.batch_size": (MAX_BATCH, "sequences generated together"),
    "sampling.max_new_tokens": (MAX_TOKENS, "tokens per completion"),
    "sampling.max_prompt_tokens": (MAX_TOKENS, "tokens per prompt"),
    "optim.micro_batch_size": (MAX_BATCH, "sequences per pass"),
    "optim.micro_batch_tokens": (MAX_MICRO_BATCH_TOKENS, "tokens per pass"),
    "optim.mini_batches": (MAX_OPTIMIZER_STEPS, "optimizer steps per step"),
    "optim.ppo_epochs": (MAX_OPTIMIZER_STEPS, "passes per step"),
}
"""The bound and its meaning of each size of a role's section (``coder.*``, ``tester.*``)."""
SIZE_BOUNDS: dict[str, tuple[int, str]] = {
    **{f"{role}.{key}": bound for role in ("coder", "tester") for key, bound in ROLE_SIZE_BOUNDS.items()},
    "tester.tests_per_suite": (MAX_TESTS_PER_SUITE, "asserts per suite"),
    "mistake_book.top_k": (MAX_TESTS_CONSIDERED, "tests replayed per problem"),
    "reward.mutation_mutants": (MAX_MUTANTS, "mutants per problem"),
    "data.problems_per_step": (MAX_PROBLEMS_PER_STEP, "256 in the paper"),
    "sandbox.workers": (MAX_WORKERS, "processes; 0 = one per core"),
    "train.steps": (MAX_TRAIN_STEPS, "111 in the paper"),
    "eval.every": (MAX_TRAIN_STEPS, "steps between evaluations"),
}
"""The configuration's sizes by dotted key (``coder.sampling.n``): their bound and its meaning."""
EVAL_SIZE_BOUNDS: dict[str, tuple[int, str]] = {
    "eval.n": (MAX_EVAL_SAMPLES, "code samples per problem"),
    "eval.tests": (MAX_TESTS_CONSIDERED, "tests per suite"),
    "eval.max_new_tokens": (MAX_TOKENS, "tokens per completion"),
    "eval.chunk": (MAX_CHUNK, "problems per round"),
    "eval.max_mutants": (MAX_MUTANTS, "mutants per problem"),
}
"""The sizes of the evaluation inside the run, bounded when it is on (``eval.data`` set)."""


def size_errors(sizes: Mapping[str, int]) -> list[str]:
    """Why ``sizes`` (dotted keys of :data:`SIZE_BOUNDS` or :data:`EVAL_SIZE_BOUNDS` to the values a
    configuration holds) are past their bounds, in order (empty when every one is within)."""
    bounds = SIZE_BOUNDS | EVAL_SIZE_BOUNDS
    return [m for key, value in sizes.items() if (m := above(key, value, *bounds[key]))]


def completions_error(problems: int, coder_n: int, tester_n: int | None) -> str | None:
    """The message when a step would sample more than :data:`MAX_COMPLETIONS_PER_STEP` completions:
    ``problems`` x ``coder_n`` x (1 + ``tester_n``), or without a Test LLM (``tester_n`` None)
    ``problems`` x ``coder_n`` (None when within)."""
    total = problems * coder_n * (1 if tester_n is None else 1 + tester_n)
    if total <= MAX_COMPLETIONS_PER_STEP:
        return None
    return (
        f"a step would sample {total:,} completions (data.problems_per_step={problems} x coder.sampling.n="
        f"{coder_n}" + ("" if tester_n is None else f" x (1 + tester.sampling.n={tester_n})")
        + f"), more than the maximum {MAX_COMPLETIONS_PER_STEP:,}"
    )  # fmt: skip
