"""SmolLM2-135M on the Ray backend (slow): one update of the coder and the tester by 2 FSDP2 ranks
each (fp32, full weights, KL reference) gives the same weights as the one-process engine, within
1e-4, on completions the model sampled itself."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.demo_model import require_demo_model

ray = pytest.importorskip("ray", reason="the Ray backend needs the ray extra")
require_demo_model()

from codea1.config import RunConfig, with_values  # noqa: E402
from codea1.engine.base import SamplingParams, TrainBatch  # noqa: E402
from codea1.engine.build import build, optimizer_steps, per_update  # noqa: E402
from codea1.engine.ray_cluster import RayLearnerGroup  # noqa: E402
from codea1.engine.ray_cluster.placement import plan, reserve  # noqa: E402
from tests.cluster.test_ray_learners import max_diff, update  # noqa: E402

pytestmark = pytest.mark.slow


def test_smollm2_update_on_two_ranks_equals_the_local_engine() -> None:
    values = {"engine.device": "cpu", "engine.dtype": "float32", "engine.rollout": "transformers",
              "cluster.learner_workers": 2, "cluster.cpus_per_worker": 0.25}  # fmt: skip
    for role in ("coder", "tester"):
        values |= {f"{role}.optim.micro_batch_size": 3, f"{role}.optim.lr": 1e-5}
    cfg = with_values(RunConfig(), values)
    local = build(cfg)
    prompts = [
        local.coder_policy.render([{"role": "user", "content": text}])
        for text in ("Write a Python function that adds two numbers.", "Write assert tests for sorted().")
    ]
    completions = local.coder_policy.generate(prompts, SamplingParams(n=4, max_new_tokens=24, seed=3))
    rng = random.Random(0)
    tb = TrainBatch(
        prompt_ids=[c.prompt_ids for c in completions],
        completion_ids=[c.completion_ids for c in completions],
        advantages=[rng.uniform(-1, 1) for _ in completions],
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        for role, learner in (("coder", local.coder_learner), ("tester", local.tester_learner)):
            layout = reserve(plan(cfg.cluster, [role], []))
            optim = getattr(cfg, role).optim
            remote = RayLearnerGroup(cfg, role, layout, per_update(optim), optimizer_steps(cfg), shared=False)
            try:
                before = {n: t.clone() for n, t in learner.named_weights().items()}
                batch = dataclasses.replace(tb)
                got, want = update(remote, batch, cfg), update(learner, batch, cfg)
                assert want["grad_norm"] > 0 and max_diff(learner.named_weights(), before) > 1e-6
                assert max_diff(remote.named_weights(), learner.named_weights()) <= 1e-4
                assert got["loss"] == pytest.approx(want["loss"], rel=1e-3, abs=1e-6)
            finally:
                remote.close()
                layout.remove()
    finally:
        ray.shutdown()
