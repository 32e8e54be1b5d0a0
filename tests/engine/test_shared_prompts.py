"""Learner passes that run a shared prompt once (``logprobs.pack``) give the log-probs, entropies and
gradients of one row per sequence, with SDPA and eager attention, and the learner's on-policy old
log-probs (read off its training pass) give the update of a recomputation.

A tiny random Llama built in memory (no files), fp32 on CPU. Measured: packed vs one row per sequence
differ by ≤ 5e-7 in log-probs here (≤ 2.5e-5 on SmolLM2-135M with 800-token prompts), so 1e-4.
"""

from __future__ import annotations

import functools

import pytest
import torch

from codea1.config import OptimConfig
from codea1.core.losses import policy_loss
from codea1.engine.base import TrainBatch
from codea1.engine.hf_local.learner import HFLearner
from codea1.engine.hf_local.logprobs import pack, response_logprobs

TOL = 1e-4
PAD = 0


def tiny_llama(attention: str, seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True,
        attn_implementation=attention,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config).eval()


A, B = (1, 5, 9, 11, 3, 7), (1, 8, 2)
PROMPTS = [A, B, A, A, B, (4, 4, 4, 4)]
COMPLETIONS = [(13, 17, 19, 23, 29), (31, 37), (41,), (), (43, 47, 53, 59), (61, 67)]
"""Two prompts with several samples each, interleaved, one empty completion and a prompt alone."""


def test_pack_puts_a_shared_prompt_once_and_each_completion_after_it() -> None:
    packed = pack(PROMPTS, COMPLETIONS, PAD, torch.device("cpu"), "sdpa")
    assert packed.ids.shape[0] == 3  # rows: prompt A, prompt B, the prompt alone
    assert packed.ids[0].tolist() == [*A, 13, 17, 19, 23, 29, 41] + [PAD] * (packed.ids.shape[1] - 12)
    assert packed.positions is not None
    assert packed.positions[0, :12].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 6]  # 41 starts at 6
    mask = packed.attention[0, 0]
    assert mask[11, :6].all() and not mask[11, 6:11].any() and mask[11, 11]  # 41 sees A and itself
    assert mask[8, :9].all() and not mask[8, 9:].any()  # 19 sees A, 13, 17 and itself, nothing later
    row_b = packed.attention[1, 0]  # B, 31 37, 43 47 53 59, then 3 padding positions
    assert packed.ids.shape[1] == 12 and packed.ids[1, 9:].tolist() == [PAD] * 3
    assert not row_b[:9, 9:].any() and row_b[10, 10] and not row_b[10, :10].any()  # padding sees itself
    # token 0 of a completion is predicted from the prompt's last position, token j from j - 1
    firsts = [t for t in range(len(packed.targets)) if packed.out_cols[t] == 0]
    assert [(int(packed.source_rows[t]), int(packed.source_cols[t])) for t in firsts] == [
        (0, 5), (0, 5), (1, 2), (1, 2), (2, 3)
    ]  # fmt: skip
    assert sorted(zip(packed.out_rows.tolist(), packed.out_cols.tolist(), strict=True))[:5] == [
        (0, 0), (0, 1), (0, 2), (0, 3), (0, 4)
    ]  # fmt: skip


def test_pack_without_shared_prompts_is_one_right_padded_row_per_sequence() -> None:
    for attention in (None, "flash_attention_2"):  # not asked for, or a kernel without custom masks
        packed = pack(PROMPTS, COMPLETIONS, PAD, torch.device("cpu"), attention)
        assert packed.ids.shape[0] == len(PROMPTS) and packed.positions is None
        assert packed.attention.shape == packed.ids.shape
        assert packed.attention.sum(1).tolist() == [
            len(p) + len(c) for p, c in zip(PROMPTS, COMPLETIONS, strict=True)
        ]
    alone = pack([A, B], [(5,), (6,)], PAD, torch.device("cpu"), "sdpa")
    assert alone.positions is None  # nothing shared: the plain layout
    with pytest.raises(ValueError, match="prompt token"):
        pack([()], [(5,)], PAD, torch.device("cpu"), "sdpa")


def test_eager_attention_gets_an_additive_mask() -> None:
    packed = pack(PROMPTS, COMPLETIONS, PAD, torch.device("cpu"), "eager")
    assert packed.attention.dtype == torch.float32
    assert packed.attention[0, 0, 11, 0] == 0 and packed.attention[0, 0, 11, 7] < -1e30


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_shared_prompt_logprobs_and_gradients_equal_one_row_per_sequence(attention: str) -> None:
    model = tiny_llama(attention)
    weights = torch.tensor([1.0, -1.0, 0.5, 2.0, -0.3, 0.7])[:, None]
    results = []
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        lp, ent, mask = response_logprobs(
            model, PROMPTS, COMPLETIONS, pad_id=PAD, temperature=0.7, chunk=3, with_grad=True,
            share_prompts=share,
        )  # fmt: skip
        ((lp + 0.1 * ent) * weights).sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results.append((lp.detach(), ent.detach(), mask, grads))
    (lp0, ent0, mask0, g0), (lp1, ent1, mask1, g1) = results
    assert torch.equal(mask0, mask1) and mask0.sum() == sum(len(c) for c in COMPLETIONS)
    assert (lp0 - lp1).abs().max() < TOL and (ent0 - ent1).abs().max() < TOL
    assert (g0 - g1).norm() / g0.norm() < TOL
    # and both equal a plain forward of each sequence alone
    with torch.no_grad():
        for b, (p, c) in enumerate(zip(PROMPTS, COMPLETIONS, strict=True)):
            if not c:
                continue
            logits = model(torch.tensor([list(p) + list(c)])).logits[0].float() / 0.7
            plain = torch.log_softmax(logits, -1)[len(p) - 1 : -1].gather(1, torch.tensor(c)[:, None])[:, 0]
            assert (lp1[b, : len(c)] - plain).abs().max() < TOL


def test_on_policy_old_logprobs_give_the_update_of_a_recomputation() -> None:
    """``train_step`` without old log-probs (the trainer's one-step case) moves the weights as it
    does with old log-probs recomputed by a pass of their own."""
    batch = TrainBatch(
        prompt_ids=list(PROMPTS[:3] + PROMPTS[4:]), completion_ids=list(COMPLETIONS[:3] + COMPLETIONS[4:]),
        advantages=[1.0, -1.0, 0.5, -0.3, 0.7],
    )  # fmt: skip
    optim = OptimConfig(lr=1e-2, warmup_steps=0, micro_batch_size=2, weight_decay=0.0)
    after, stats, passes = [], [], []
    for recompute in (True, False):
        model = tiny_llama("sdpa")
        calls = []
        model.get_decoder().register_forward_hook(lambda *_, calls=calls: calls.append(1))
        learner = HFLearner(FullWeights(model), optim, 4, temperature=1.0, pad_id=PAD)
        step = TrainBatch(batch.prompt_ids, batch.completion_ids, batch.advantages)
        if recompute:
            step.old_logprobs = learner.logprobs(step)
        stats.append(learner.train_step(step, functools.partial(policy_loss, kl_coef=0.0)))
        after.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        passes.append(len(calls))
    assert (after[0] - after[1]).abs().max() < 1e-6
    assert abs(stats[0]["loss"] - stats[1]["loss"]) < 1e-6
    assert stats[1]["loss/approx_kl"] == 0.0 and stats[1]["loss/ratio_max"] == 1.0
    assert passes == [6, 3]  # 3 micro-batches: with a recomputation, twice the decoder passes


class FullWeights:
    """The learner's view of a model trained in full (as ``weights.py`` gives it)."""

    adapter = None

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        return dict(self.model.named_parameters())

    def train_model(self) -> torch.nn.Module:
        return self.model
