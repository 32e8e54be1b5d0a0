"""``HFLearner.from_config`` is the one place a run's configuration becomes a learner (both
backends build it there): the engine's log-prob chunking and prompt sharing, the loss's weighting
and entropy."""

from __future__ import annotations

import torch

from codea1.config import EngineConfig, LossConfig, OptimConfig
from codea1.engine.hf_local import HFLearner


class OneTensor:
    """The least a learner needs from its weights: something to train."""

    adapter = None

    def __init__(self) -> None:
        self.p = torch.nn.Parameter(torch.zeros(2))

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        return {"p": self.p}


def test_a_learner_takes_its_settings_from_the_engine_and_loss_configs() -> None:
    engine = EngineConfig(logprob_chunk=64, share_prompts=False)
    loss = LossConfig(aggregation="seq-mean-token-mean", entropy_coef=0.01)
    got = HFLearner.from_config(OneTensor(), OptimConfig(), 10, engine, loss, temperature=0.7, pad_id=3)
    assert (got.logprob_chunk, got.share_prompts, got.temperature, got.pad_id) == (64, False, 0.7, 3)
    assert (got.weighting, got.entropy) == ("sequences", True)
    got = HFLearner.from_config(
        OneTensor(), OptimConfig(), 10, EngineConfig(), LossConfig(), temperature=1, pad_id=0
    )
    assert (got.weighting, got.entropy, got.logprob_chunk, got.share_prompts) == ("tokens", False, 1024, True)
