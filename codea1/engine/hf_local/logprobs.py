"""Per-token log-probs of response tokens, computed without holding a batch's full-vocabulary logits.

The decoder runs once to hidden states; the output head, temperature and ``log_softmax`` are applied
to ``chunk`` response positions at a time. With gradients, each chunk is wrapped in activation
checkpointing so backward recomputes its logits instead of keeping them. During generation,
:class:`SampledTokenLogprobs` records the same quantity for each sampled token while keeping only
one step's ``[batch, vocab]`` row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint
from transformers import LogitsProcessor


def right_padded(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``prompt + completion`` rows, right-padded: ``(input_ids, attention_mask)``, both ``[B, L]``."""
    rows = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def padded_values(values: Sequence[Sequence[float]], width: int, device: torch.device) -> torch.Tensor:
    """Ragged float rows → ``[B, width]`` fp32 tensor, zero-padded."""
    out = torch.zeros((len(values), width), dtype=torch.float32)
    for i, v in enumerate(values):
        if len(v):
            out[i, : len(v)] = torch.tensor(list(v), dtype=torch.float32)
    return out.to(device)


def _head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    softcap: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    token = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return token, entropy


class ResponseScorer(torch.nn.Module):
    """Decoder once, then the output head over selected positions in chunks: the one forward pass
    of :func:`response_logprobs`. As a module of its own it can be the root of FSDP2 sharding
    (``fsdp.py``), so that the root's hooks gather the embeddings and the head around it."""

    def __init__(self, causal_lm: Any) -> None:
        super().__init__()
        self.causal_lm = causal_lm

    def forward(
        self, ids: torch.Tensor, attn: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor,
        temperature: float, chunk: int, with_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Log-probs and entropies of the tokens at ``pos + 1`` of ``rows``, given their prefixes."""
        decoder = self.causal_lm.get_decoder()
        head = self.causal_lm.get_output_embeddings()
        softcap = getattr(self.causal_lm.config, "final_logit_softcapping", None)
        hidden = decoder(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
        h = hidden[rows, pos]
        targets = ids[rows, pos + 1]
        lps, ents = [], []
        for s in range(0, len(rows), max(1, chunk)):
            hs, ts = h[s : s + chunk], targets[s : s + chunk]
            if with_grad:
                lp, ent = checkpoint(_head_logprobs, head, hs, ts, temperature, softcap, use_reentrant=False)
            else:
                lp, ent = _head_logprobs(head, hs, ts, temperature, softcap)
            lps.append(lp)
            ents.append(ent)
        return torch.cat(lps), torch.cat(ents)


SCORER_ATTRIBUTE = "_codea1_scorer"
"""Where a sharded causal LM keeps its :class:`ResponseScorer` (set without registering it as a
submodule, which would make a cycle)."""


def scorer_of(causal_lm: Any) -> ResponseScorer:
    """The causal LM's own scorer when it was sharded, else a fresh one around it."""
    return causal_lm.__dict__.get(SCORER_ATTRIBUTE) or ResponseScorer(causal_lm)


def response_logprobs(
    causal_lm: Any,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    pad_id: int,
    temperature: float,
    chunk: int,
    with_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token given its prefix under ``softmax(logits / temperature)``.

    Returns ``(logprobs, entropy, mask)``, each ``[B, R]`` with ``R`` the longest completion
    (at least 1); padding positions are 0 in ``logprobs``/``entropy`` and 0 in ``mask``.
    Works for any ``*ForCausalLM`` whose logits are ``lm_head(decoder(x))`` (with optional final
    logit soft-capping).
    """
    device = next(causal_lm.parameters()).device
    ids, attn = right_padded(prompt_ids, completion_ids, pad_id, device)
    rows, cols, pos = [], [], []
    for b, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        for i in range(len(c)):
            rows.append(b)
            cols.append(i)
            pos.append(len(p) - 1 + i)
    width = max([len(c) for c in completion_ids] + [1])
    out_lp = torch.zeros((len(completion_ids), width), dtype=torch.float32, device=device)
    out_ent = torch.zeros_like(out_lp)
    mask = torch.zeros_like(out_lp)
    if not rows:
        return out_lp, out_ent, mask
    r = torch.tensor(rows, device=device)
    c = torch.tensor(cols, device=device)
    p = torch.tensor(pos, device=device)
    lp, ent = scorer_of(causal_lm)(ids, attn, r, p, temperature, chunk, with_grad)
    out_lp = out_lp.index_put((r, c), lp)
    out_ent = out_ent.index_put((r, c), ent)
    mask[r, c] = 1.0
    return out_lp, out_ent, mask


class SampledTokenLogprobs(LogitsProcessor):
    """Records ``log_softmax(raw_logits / T)[sampled token]`` for every generation step.

    Placed first in the processor list, it sees the model's raw logits; at step ``t+1`` the token
    sampled at step ``t`` is the last column of ``input_ids``, so only one step's log-softmax row is
    kept. Top-k/top-p truncation is deliberately not reflected (the learner uses the same
    temperature-only distribution). Call :meth:`finish` with the final sequences.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self._prev: torch.Tensor | None = None
        self._steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._prev is not None:
            self._steps.append(self._prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self._prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """``[B, new_tokens]`` log-probs of the generated columns of ``sequences``."""
        if self._prev is not None:
            self._steps.append(self._prev.gather(1, sequences[:, -1:]).squeeze(1))
            self._prev = None
        if not self._steps:
            return torch.zeros((sequences.shape[0], 0))
        return torch.stack(self._steps, dim=1).cpu()
