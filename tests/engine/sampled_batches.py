"""Helpers of the engine tests that train on or rescore completions a policy sampled."""

from __future__ import annotations

from collections.abc import Sequence

from codea1.engine.base import Completion, TrainBatch


def signed_batch(comps: Sequence[Completion]) -> TrainBatch:
    """The completions as a training batch with advantages -1, +1, -1, ... (a real gradient)."""
    return TrainBatch(
        prompt_ids=[c.prompt_ids for c in comps],
        completion_ids=[c.completion_ids for c in comps],
        advantages=[1.0 if i % 2 else -1.0 for i in range(len(comps))],
    )


def max_logprob_gap(comps: Sequence[Completion], recomputed: Sequence[Sequence[float]]) -> float:
    """The largest per-token gap between the log-probs recorded while sampling and ``recomputed``."""
    return max(
        abs(a - b) for c, r in zip(comps, recomputed, strict=True) for a, b in zip(c.logprobs, r, strict=True)
    )
