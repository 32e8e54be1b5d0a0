"""Per-token log-probs of response tokens, computed without holding a batch's full-vocabulary logits.

The decoder runs once to hidden states; the output head, temperature and ``log_softmax`` are applied
to ``chunk`` response positions at a time. With gradients, each chunk is wrapped in activation
checkpointing so backward recomputes its logits instead of keeping them. Completions of the same
prompt share a decoder row (:func:`pack`), so a prompt with ``n`` samples is computed once, not
``n`` times; a row is capped (:data:`MAX_SHARED_ROW_TOKENS`) and so is its dense mask
(:data:`MAX_MASK_ELEMENTS`). During generation, :class:`SampledTokenLogprobs` records the same
quantity for each sampled token while keeping only one step's ``[batch, vocab]`` row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint
from transformers import LogitsProcessor


@dataclass(frozen=True)
class PackedBatch:
    """Prompt-completion sequences laid out as decoder rows, and where each completion token's
    log-prob is read and written.

    Sequences that share a prompt (the ``n`` samples of one prompt) share a row, or several within
    a length cap (:func:`shared_rows`): the prompt once, then each completion, each attending to the
    prompt and to its own earlier tokens only, with positions that continue the prompt's as if it
    were alone (``positions``, and a 4-D ``attention`` mask ``[B, 1, L, L]``, boolean for SDPA,
    additive for eager attention). Without
    sharing each sequence is its own right-padded row and ``attention`` is the usual ``[B, L]``
    padding mask (``positions`` None). The token predicted from row ``source_rows[t]`` at column
    ``source_cols[t]`` is ``targets[t]``; its log-prob goes to ``[out_rows[t], out_cols[t]]`` of the
    ``[sequences, longest completion]`` result.
    """

    ids: torch.Tensor
    attention: torch.Tensor
    positions: torch.Tensor | None
    source_rows: torch.Tensor
    source_cols: torch.Tensor
    targets: torch.Tensor
    out_rows: torch.Tensor
    out_cols: torch.Tensor


SHARED_PROMPT_ATTENTION = ("sdpa", "eager")
"""Attention implementations that take the custom 4-D mask of rows with a shared prompt. They build
a dense ``[B, 1, L, L]`` mask from a 2-D padding mask too, so right-padded rows of one sequence each
are run without one (:func:`response_logprobs`): causal attention alone is exact for them."""

MAX_SHARED_ROW_TOKENS = 8192
"""Default cap on a shared-prompt row (prompt + its completions): a longer group is split into
several rows, each holding the prompt once (:func:`shared_rows`). Attention over a row with an
explicit mask costs ``L²`` (no causal block skipping), so long rows cost more than sharing saves."""

MAX_MASK_ELEMENTS = 1 << 28
"""Default limit on the dense shared-prompt mask (rows × width², 256 MiB as booleans, about 1 GiB
with the temporaries that build it): past it the sequences get one row each instead."""


def shared_rows(
    prompt_ids: Sequence[Sequence[int]], completion_lengths: Sequence[int], max_row_tokens: int = 0
) -> list[list[int]]:
    """Sequences with equal prompts grouped into rows, in order of first appearance: each row is the
    prompt once and then as many of its completions, in order, as keep it within ``max_row_tokens``
    (0: no cap); a completion too long for any row with another is alone in its row."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompt_ids):
        groups.setdefault(tuple(p), []).append(i)
    rows: list[list[int]] = []
    for prompt, members in groups.items():
        row: list[int] = []
        used = len(prompt)
        for i in members:
            if row and max_row_tokens > 0 and used + completion_lengths[i] > max_row_tokens:
                rows.append(row)
                row, used = [], len(prompt)
            row.append(i)
            used += completion_lengths[i]
        rows.append(row)
    return rows


def sharing_pays(
    rows: Sequence[Sequence[int]],
    prompt_lengths: Sequence[int],
    completion_lengths: Sequence[int],
    max_mask_elements: int = 0,
    *,
    bounded: bool = True,
) -> bool:
    """Whether the shared-prompt ``rows`` are worth their dense mask: some row holds two sequences
    and, when ``bounded``, the rows take no more positions (rows × widest row) than one right-padded
    row per sequence (sequences × longest sequence) and the mask (rows × width²) stays within
    ``max_mask_elements`` (0: no limit), so that a token budget counted in padded positions bounds
    either layout. Unbounded (CPU runs without a token budget), any shared row pays."""
    if not any(len(r) > 1 for r in rows):
        return False
    if not bounded:
        return True
    width = max(prompt_lengths[r[0]] + sum(completion_lengths[i] for i in r) for r in rows)
    longest = max(p + c for p, c in zip(prompt_lengths, completion_lengths, strict=True))
    if len(rows) * width > len(prompt_lengths) * longest:
        return False
    return max_mask_elements <= 0 or len(rows) * width * width <= max_mask_elements


def pack(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device,
    attention: str | None = "sdpa",
    *,
    max_row_tokens: int = 0,
    max_mask_elements: int = 0,
    bounded: bool = True,
) -> PackedBatch:
    """Lay out ``prompt + completion`` sequences as rows (see :class:`PackedBatch`).

    With ``attention`` in :data:`SHARED_PROMPT_ATTENTION`, sequences with equal prompts share rows
    of at most ``max_row_tokens`` (:func:`shared_rows`) when that pays (:func:`sharing_pays`, with
    ``max_mask_elements``); otherwise (or with any other implementation) every sequence has a row.
    0 means no cap or limit. Completions may be empty; prompts may not.
    """
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("every sequence needs at least one prompt token")
    comp_lengths = [len(c) for c in completion_ids]
    members = [[i] for i in range(len(prompt_ids))]
    share = False
    if attention in SHARED_PROMPT_ATTENTION:
        grouped = shared_rows(prompt_ids, comp_lengths, max_row_tokens)
        share = sharing_pays(
            grouped, [len(p) for p in prompt_ids], comp_lengths, max_mask_elements, bounded=bounded
        )
        if share:
            members = grouped
    rows: list[list[int]] = []
    positions: list[list[int]] = []
    segments: list[list[int]] = []  # 0: the prompt, k: the row's k-th completion
    src_r, src_c, tgt, out_r, out_c = [], [], [], [], []
    for r, group in enumerate(members):
        prompt = list(prompt_ids[group[0]])
        row, pos, seg = list(prompt), list(range(len(prompt))), [0] * len(prompt)
        for k, i in enumerate(group, start=1):
            comp = list(completion_ids[i])
            start = len(row)
            for j, token in enumerate(comp):
                src_r.append(r)
                src_c.append(len(prompt) - 1 if j == 0 else start + j - 1)
                tgt.append(token)
                out_r.append(i)
                out_c.append(j)
            row += comp
            pos += range(len(prompt), len(prompt) + len(comp))
            seg += [k] * len(comp)
        rows.append(row)
        positions.append(pos)
        segments.append(seg)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    seg_t = torch.full((len(rows), width), -1, dtype=torch.long)
    pos_t = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (row, pos, seg) in enumerate(zip(rows, positions, segments, strict=True)):
        ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
        pos_t[r, : len(pos)] = torch.tensor(pos, dtype=torch.long)
        seg_t[r, : len(seg)] = torch.tensor(seg, dtype=torch.long)
    if share:  # built where it is used: an L² mask is not worth a host copy and a transfer
        mask: torch.Tensor = shared_prompt_mask(seg_t.to(device), additive=attention == "eager")
        position_ids: torch.Tensor | None = pos_t.to(device)
    else:
        mask, position_ids = (seg_t >= 0).long(), None

    def as_tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return PackedBatch(
        ids.to(device), mask.to(device), position_ids, as_tensor(src_r), as_tensor(src_c),
        as_tensor(tgt), as_tensor(out_r), as_tensor(out_c),
    )  # fmt: skip


def shared_prompt_mask(segments: torch.Tensor, additive: bool) -> torch.Tensor:
    """``[B, 1, L, L]`` attention of rows whose ``segments`` are 0 (prompt), k (k-th completion)
    or -1 (padding): causal, and a completion sees the prompt and itself only. Padding positions
    see themselves only, so no query row is empty. Boolean (True = attend), or additive fp32
    (0 or the most negative float) for implementations that add the mask to the scores."""
    width = segments.shape[1]
    query, key = segments[:, :, None], segments[:, None, :]
    # a valid query's keys are valid whenever they are the prompt or its own completion, so
    # (key >= 0) is implied; in place, so that at most two [B, L, L] temporaries exist at once
    allowed = (key == query) | (key == 0)
    allowed &= query >= 0
    allowed &= torch.ones((width, width), dtype=torch.bool, device=segments.device).tril_()
    allowed |= torch.eye(width, dtype=torch.bool, device=segments.device)
    allowed = allowed[:, None]
    if not additive:
        return allowed
    scores = torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device)
    return scores.masked_fill(~allowed, torch.finfo(torch.float32).min)


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
        self, ids: torch.Tensor, attention: torch.Tensor | None, positions: torch.Tensor | None,
        source_rows: torch.Tensor, source_cols: torch.Tensor, targets: torch.Tensor,
        temperature: float, chunk: int, with_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Log-probs and entropies of ``targets``, each predicted from the hidden state at
        ``[source_rows, source_cols]`` of the rows ``ids`` (see :class:`PackedBatch`)."""
        decoder = self.causal_lm.get_decoder()
        head = self.causal_lm.get_output_embeddings()
        softcap = getattr(self.causal_lm.config, "final_logit_softcapping", None)
        hidden = decoder(
            input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=False
        ).last_hidden_state
        # index_select, not hidden[rows, cols]: a shared prompt's last position feeds the first token
        # of every completion, and index_select's backward (index_add) sums such repeats in a fixed
        # order, where advanced indexing's (index_put with accumulate) does not on CPU
        flat = source_rows * hidden.shape[1] + source_cols
        h = hidden.reshape(-1, hidden.shape[-1]).index_select(0, flat)
        lps, ents = [], []
        for s in range(0, len(targets), max(1, chunk)):
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
    share_prompts: bool = True,
    max_row_tokens: int = MAX_SHARED_ROW_TOKENS,
    max_mask_elements: int = MAX_MASK_ELEMENTS,
    bounded: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token given its prefix under ``softmax(logits / temperature)``.

    Returns ``(logprobs, entropy, mask)``, each ``[B, R]`` with ``R`` the longest completion
    (at least 1); padding positions are 0 in ``logprobs``/``entropy`` and 0 in ``mask``.
    Works for any ``*ForCausalLM`` whose logits are ``lm_head(decoder(x))`` (with optional final
    logit soft-capping). With ``share_prompts``, sequences with the same prompt run the prompt once,
    in rows of at most ``max_row_tokens`` and where the mask stays within ``max_mask_elements``
    (see :func:`pack`): the same log-probs up to float rounding, for fewer tokens. Right-padded rows
    of one sequence each run with no mask under SDPA and eager attention (causal attention is exact
    for them, and SDPA keeps its flash and causal kernels); other implementations get the padding mask.
    ``bounded=False`` keeps the layout of earlier versions, bit for bit: no row cap, no mask limit,
    every shared row used, the padding mask always passed (the learner's choice on CPU without a
    token budget, where memory is not the constraint and runs stay reproducible across versions).
    """
    device = next(causal_lm.parameters()).device
    width = max([len(c) for c in completion_ids] + [1])
    out_lp = torch.zeros((len(completion_ids), width), dtype=torch.float32, device=device)
    out_ent = torch.zeros_like(out_lp)
    mask = torch.zeros_like(out_lp)
    if not any(completion_ids):
        return out_lp, out_ent, mask
    implementation = getattr(causal_lm.config, "_attn_implementation", None)
    packed = pack(
        prompt_ids, completion_ids, pad_id, device, implementation if share_prompts else None,
        max_row_tokens=max_row_tokens if bounded else 0, max_mask_elements=max_mask_elements if bounded else 0,
        bounded=bounded,
    )  # fmt: skip
    causal_only = bounded and packed.positions is None and implementation in SHARED_PROMPT_ATTENTION
    lp, ent = scorer_of(causal_lm)(
        packed.ids, None if causal_only else packed.attention, packed.positions, packed.source_rows,
        packed.source_cols, packed.targets, temperature, chunk, with_grad,
    )  # fmt: skip
    where = (packed.out_rows, packed.out_cols)
    out_lp = out_lp.index_put(where, lp)
    out_ent = out_ent.index_put(where, ent)
    mask[where] = 1.0
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
