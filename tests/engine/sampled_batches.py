"""Helpers of the engine tests that train on or rescore completions a policy sampled."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

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


def greedy_transformers(
    learner: Any, policy: Any, prompts: Sequence[str], max_new_tokens: int = 16
) -> list[tuple[int, ...]]:
    """Greedy completions of the learner's own weights through transformers ``generate``, cut after
    the first eos token (what a greedy rollout engine must reproduce)."""
    model = learner.weights.train_model()
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([policy.tokenizer(p, add_special_tokens=False).input_ids])
            seq = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                max_new_tokens=max_new_tokens, eos_token_id=sorted(policy.eos_ids),
            )[0, ids.shape[1]:].tolist()  # fmt: skip
            cut = next((t + 1 for t, tok in enumerate(seq) if tok in policy.eos_ids), len(seq))
            out.append(tuple(seq[:cut]))
    return out
