"""The transformers engine on CUDA (bf16): sampling log-probs match the learner, an update moves weights."""

from __future__ import annotations

import functools

import pytest
import torch

from codea1.config import EngineConfig, OptimConfig
from codea1.core.losses import policy_loss
from codea1.engine.base import SamplingParams, TrainBatch
from tests.demo_model import require_demo_model

require_demo_model()
pytestmark = pytest.mark.gpu


def test_cuda_generation_logprobs_and_update() -> None:
    from codea1.engine.hf_local import build_roles

    cfg = EngineConfig(mode="separate", dtype="bfloat16", device="cuda")
    optim = OptimConfig(lr=1e-4, warmup_steps=0, micro_batch_size=4)
    roles = build_roles(cfg, optim, optim, 2, temperature_coder=1.0, temperature_tester=1.0)
    policy, learner = roles.coder_policy, roles.coder_learner
    prompt = policy.render([{"role": "user", "content": "Write a Python function add(a, b)."}])
    comps = policy.generate([prompt], SamplingParams(n=4, max_new_tokens=16, seed=0))
    batch = TrainBatch(
        prompt_ids=[c.prompt_ids for c in comps],
        completion_ids=[c.completion_ids for c in comps],
        advantages=[1.0, -1.0, 0.5, -0.5],
    )
    recomputed = learner.logprobs(batch)
    diff = max(
        abs(a - b) for c, r in zip(comps, recomputed, strict=True) for a, b in zip(c.logprobs, r, strict=True)
    )
    assert diff < 0.1  # bf16 decode vs full forward
    before = {n: p.detach().clone() for n, p in learner.params.items()}
    learner.train_step(batch, functools.partial(policy_loss, kl_coef=0.001))
    assert any(not torch.equal(p, before[n]) for n, p in learner.params.items())
