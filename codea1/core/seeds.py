"""Every seed a run derives, in one place: pure functions of integers, no I/O, no global RNG.

A run has two configured seeds, ``train.seed`` (sampling, initial weights) and ``data.seed``
(problem order); everything else is derived from them here, so that a step's randomness depends on
(seed, step, role, prompt, sample) only and ``--resume`` redoes a step exactly:

- :func:`call_seed`: one role's sampling call at one training step,
  ``train.seed × 1_000_003 + 2 × step``, plus 1 for the tester; no two (step, role) pairs of a run
  share a seed.
- :func:`request_seed`: one sample inside a call (the vLLM engine seeds every sample on its own): a
  hash of (call seed, prompt index, sample index), so a sample does not depend on how the call's
  prompts are batched or scheduled.
- :func:`batch_seed`: one generation batch inside a call (the transformers engine seeds each
  ``generate`` batch): call seed + batch index.
- :func:`epoch_order`: the problem sampler's order in one epoch, a permutation drawn by NumPy's
  ``default_rng([data.seed, epoch])``.
- :func:`learner_seed`: a role's initial weights on the scripted engine (the tester's is one
  above the coder's); the LoRA adapters of both roles are drawn from ``train.seed`` itself.
- :func:`script_rng`: the scripted engine's generator for one answer, keyed by (role, seed,
  sample, prompt text).

The values are part of a run's reproducibility: changing a formula changes every completion of
every run (tests/core/test_seeds.py pins them).
"""

from __future__ import annotations

import hashlib
import random

import numpy as np

STEP_STRIDE = 1_000_003
"""A prime: ``train.seed × STEP_STRIDE`` keeps the call seeds of runs with nearby seeds apart."""


def call_seed(run_seed: int, step: int, role: str) -> int:
    """The seed of ``role``'s sampling call at training ``step``: ``run_seed × 1_000_003 + 2 × step``
    for the coder, one more for the tester."""
    return run_seed * STEP_STRIDE + step * 2 + (1 if role == "tester" else 0)


def request_seed(seed: int, prompt_index: int, sample_index: int) -> int:
    """The seed of one sample: a hash of the call's seed (see :func:`call_seed`), the prompt's index
    and the sample's index, so a sample does not depend on how calls are batched. Non-negative,
    below 2**63."""
    digest = hashlib.blake2b(f"{seed}:{prompt_index}:{sample_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def batch_seed(seed: int, batch_index: int) -> int:
    """The seed of one ``generate`` batch of a seeded call (the transformers engine): seed + index.
    Unlike :func:`request_seed` it depends on how the call is cut into batches."""
    return seed + batch_index


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The order of ``n`` problems in ``epoch``: ``default_rng([seed, epoch]).permutation(n)``."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def learner_seed(run_seed: int, role: str) -> int:
    """The seed of a role's initial weights on the scripted engine: the tester's is one above."""
    return run_seed + (1 if role == "tester" else 0)


def script_rng(role: str, seed: int | None, sample: int, prompt: str) -> random.Random:
    """The scripted engine's generator for sample ``sample`` of ``prompt`` (``role``: coder or
    tester), seeded by the string ``"role|seed|sample|prompt"``."""
    return random.Random(f"{role}|{seed}|{sample}|{prompt}")
