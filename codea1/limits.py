"""The largest sizes accepted for what a user can set: group sizes, batches, tokens, tests, workers, steps.

A size past these bounds is not a bigger run but a runaway one (``coder.sampling.n=10**12`` grows
until the kernel kills the process), so it is refused when the configuration or the command line
is checked, before anything is started or created. Each bound is far above what the paper uses
(docs/algorithm.md: groups of 8, 4,096 new tokens, 8 tests a suite, 256 problems a step). The
worker bound is the machine's: a sandbox worker is a process tree with its own cgroups, and more
than a few per core only thrash.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codea1.config import RunConfig

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
"""Mutants of the reference per problem (``eval.max_mutants``, ``eval --max-mutants``)."""
MAX_JOBS_PER_CALL = 1 << 16
"""Grid jobs per sandbox call (``sandbox run --batch``)."""
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


def size_errors(cfg: RunConfig) -> list[str]:
    """Why the sizes of ``cfg`` are past the bounds above (empty when every one is within)."""
    checks: list[tuple[str, int, int, str]] = []
    for role in ("coder", "tester"):
        s, o = getattr(cfg, role).sampling, getattr(cfg, role).optim
        checks += [
            (f"{role}.sampling.n", s.n, MAX_GROUP_SIZE, "completions per prompt; 8 in the paper"),
            (f"{role}.sampling.batch_size", s.batch_size, MAX_BATCH, "sequences generated together"),
            (f"{role}.sampling.max_new_tokens", s.max_new_tokens, MAX_TOKENS, "tokens per completion"),
            (f"{role}.sampling.max_prompt_tokens", s.max_prompt_tokens, MAX_TOKENS, "tokens per prompt"),
            (f"{role}.optim.micro_batch_size", o.micro_batch_size, MAX_BATCH, "sequences per pass"),
            (
                f"{role}.optim.micro_batch_tokens",
                o.micro_batch_tokens,
                MAX_MICRO_BATCH_TOKENS,
                "tokens per pass",
            ),
            (f"{role}.optim.mini_batches", o.mini_batches, MAX_OPTIMIZER_STEPS, "optimizer steps per step"),
            (f"{role}.optim.ppo_epochs", o.ppo_epochs, MAX_OPTIMIZER_STEPS, "passes per step"),
        ]
    checks += [
        ("tester.tests_per_suite", cfg.tester.tests_per_suite, MAX_TESTS_PER_SUITE, "asserts per suite"),
        ("mistake_book.top_k", cfg.mistake_book.top_k, MAX_TESTS_CONSIDERED, "tests replayed per problem"),
        ("data.problems_per_step", cfg.data.problems_per_step, MAX_PROBLEMS_PER_STEP, "256 in the paper"),
        ("sandbox.workers", cfg.sandbox.workers, MAX_WORKERS, "processes; 0 = one per core"),
        ("train.steps", cfg.train.steps, MAX_TRAIN_STEPS, "111 in the paper"),
        ("eval.every", cfg.eval.every, MAX_TRAIN_STEPS, "steps between evaluations"),
    ]
    if cfg.eval.data:
        e = cfg.eval
        checks += [
            ("eval.n", e.n, MAX_EVAL_SAMPLES, "code samples per problem"),
            ("eval.tests", e.tests, MAX_TESTS_CONSIDERED, "tests per suite"),
            ("eval.max_new_tokens", e.max_new_tokens, MAX_TOKENS, "tokens per completion"),
            ("eval.chunk", e.chunk, MAX_CHUNK, "problems per round"),
            ("eval.max_mutants", e.max_mutants, MAX_MUTANTS, "mutants per problem"),
        ]
    errors = [m for key, value, maximum, what in checks if (m := above(key, value, maximum, what))]
    if cfg.tester.tests_per_suite < 1:
        errors.append(f"tester.tests_per_suite must be >= 1, got {cfg.tester.tests_per_suite}")
    if cfg.eval.every < 0:
        errors.append(f"eval.every must be >= 0 (0 = only at step 0 and the last step), got {cfg.eval.every}")
    if not errors:
        b, nc, nt = cfg.data.problems_per_step, cfg.coder.sampling.n, cfg.tester.sampling.n
        total = b * nc * (1 + nt if cfg.train.trains_tester else 1)
        if total > MAX_COMPLETIONS_PER_STEP:
            errors.append(
                f"a step would sample {total:,} completions (data.problems_per_step={b} x coder.sampling.n="
                f"{nc}" + (f" x (1 + tester.sampling.n={nt})" if cfg.train.trains_tester else "")
                + f"), more than the maximum {MAX_COMPLETIONS_PER_STEP:,}"
            )  # fmt: skip
    return errors
