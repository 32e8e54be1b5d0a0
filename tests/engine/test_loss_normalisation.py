"""The update does not depend on how the mini-batch is cut: into micro-batches, or across ranks.

A tiny random-init Llama (built from a config, fp32, no download) is trained one step by the real
``HFLearner`` with the project's PPO-clip loss, KL and entropy bonus on, for every aggregation mode.
The batch holds ragged responses, one of them empty (which the sequence modes leave out), and the two
halves given to the two data-parallel ranks hold different numbers of tokens.

The 2-rank update runs in two spawned processes over gloo, its gradients averaged over the ranks
after every backward either by a plain all-reduce (as DDP does) or by FSDP2 ``fully_shard`` (so every
rank must run the same number of backward passes: each rank's half is one micro-batch; a micro-batch
of empty responses has no backward).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
import torch

from codea1.config import OptimConfig
from codea1.core.losses import ADDITIVE_STATS, policy_loss
from codea1.engine.base import TrainBatch
from codea1.engine.hf_local.learner import HFLearner
from codea1.engine.hf_local.weights import FullWeights

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
PROMPTS = [(5, 9, 13), (7, 3, 3, 8), (21, 4, 6), (2, 30, 17, 11, 9)]
COMPLETIONS = [(40, 41, 42, 43, 44), (), (50, 51), (33, 34, 35, 36, 37, 38, 39)]
ADVANTAGES = [1.0, -0.5, -1.5, 0.7]
LR = 1e-3
HALVES = (slice(0, 2), slice(2, 4))
"""Rank 0 gets 5 response tokens, rank 1 gets 9."""
SYNCS = ("all-reduce", "fsdp2")
"""How the ranks' gradients are averaged: an all-reduce after each backward (as DDP), or FSDP2."""


def _tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).float().eval()


def _learner(model: torch.nn.Module, mode: str, micro_batch_size: int) -> HFLearner:
    optim = OptimConfig(
        lr=LR, warmup_steps=0, micro_batch_size=micro_batch_size, weight_decay=0.0, grad_clip=0.0
    )
    weights = FullWeights(model, keep_reference=False)
    return HFLearner(weights, optim, 1, temperature=1.0, pad_id=0, aggregation=mode, entropy=True)


def _loss_fn(mode: str) -> functools.partial:
    return functools.partial(policy_loss, aggregation=mode, kl_coef=0.1, entropy_coef=0.01)


def _batch(model: torch.nn.Module) -> TrainBatch:
    """The batch with old and reference log-probs set off the current ones (ratios hit both clips)."""
    batch = TrainBatch(list(PROMPTS), list(COMPLETIONS), list(ADVANTAGES))
    current = _learner(copy.deepcopy(model), "token-mean", len(PROMPTS)).logprobs(batch)
    g = torch.Generator().manual_seed(1)

    def shifted(scale: float) -> list[tuple[float, ...]]:
        return [tuple((torch.tensor(r) + scale * torch.randn(len(r), generator=g)).tolist()) for r in current]

    batch.old_logprobs, batch.ref_logprobs = shifted(0.4), shifted(0.2)
    return batch


def _part(batch: TrainBatch, sl: slice) -> TrainBatch:
    assert batch.old_logprobs is not None and batch.ref_logprobs is not None
    return TrainBatch(
        batch.prompt_ids[sl], batch.completion_ids[sl], batch.advantages[sl], batch.old_logprobs[sl],
        batch.ref_logprobs[sl],
    )  # fmt: skip


def _update(model: torch.nn.Module, batch: TrainBatch, mode: str, micro_batch_size: int):
    """One train step on a copy of ``model``: (stats, {name: grad}, {name: updated param})."""
    learner = _learner(copy.deepcopy(model), mode, micro_batch_size)
    grads: dict[str, torch.Tensor] = {}  # read when AdamW steps: train_step frees them before returning
    learner.optimizer.register_step_pre_hook(
        lambda *_: grads.update({n: p.grad.detach().clone() for n, p in learner.params.items()})
    )
    stats = learner.train_step(batch, _loss_fn(mode))
    params = {n: p.detach().clone() for n, p in learner.params.items()}
    return stats, grads, params


def _max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.fixture(scope="module")
def model_and_batch():
    model = _tiny_llama()
    return model, _batch(model)


@pytest.mark.parametrize("mode", MODES)
def test_micro_batches_of_one_equal_one_micro_batch_of_all(model_and_batch, mode):
    model, batch = model_and_batch
    whole_stats, whole_grads, whole_params = _update(model, batch, mode, len(batch))
    initial = {n: p.detach() for n, p in model.named_parameters()}
    assert _max_abs_diff(whole_params, initial) > LR / 2  # the step moved the weights
    for size in (1, 2, 3):
        stats, grads, params = _update(model, batch, mode, size)
        assert _max_abs_diff(grads, whole_grads) <= 1e-6, size
        assert _max_abs_diff(params, whole_params) <= 1e-6, size
        for k in ("loss", *ADDITIVE_STATS):
            assert stats[k] == pytest.approx(whole_stats[k], abs=1e-6), (size, k)
        assert stats["grad_norm"] == pytest.approx(whole_stats["grad_norm"], rel=1e-5)


def _average_gradients_after_each_backward(params: list[torch.nn.Parameter]) -> None:
    """Average every gradient over the ranks once a backward has accumulated into all of them."""
    ready: set[int] = set()
    world = torch.distributed.get_world_size()

    def hook(p: torch.Tensor) -> None:
        ready.add(id(p))
        if len(ready) < len(params):
            return
        ready.clear()
        flat = torch.cat([q.grad.reshape(-1) for q in params])
        torch.distributed.all_reduce(flat)
        flat /= world
        offset = 0
        for q in params:
            q.grad.copy_(flat[offset : offset + q.numel()].view_as(q))
            offset += q.numel()

    for p in params:
        p.register_post_accumulate_grad_hook(hook)


def _fully_shard(model: torch.nn.Module) -> None:
    """FSDP2 over the ranks: each decoder layer, the decoder and the output head.

    The learner calls the decoder and the head separately (log-probs without full logits), so each
    is its own FSDP2 root instead of the whole causal LM.
    """
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model.model)
    fully_shard(model.lm_head)


def _data_parallel_rank(rank: int, world: int, init_file: str, batch: TrainBatch, out_dir: str) -> None:
    """One rank: its half of the batch as one micro-batch, for each way of averaging gradients."""
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    try:
        model = _tiny_llama()
        results = {}
        for sync in SYNCS:
            for mode in MODES:
                replica = copy.deepcopy(model)
                if sync == "fsdp2":
                    _fully_shard(replica)
                learner = _learner(replica, mode, 2)
                if sync == "all-reduce":
                    _average_gradients_after_each_backward(list(learner.params.values()))
                stats = learner.train_step(_part(batch, HALVES[rank]), _loss_fn(mode))
                full = {n: p.full_tensor() if sync == "fsdp2" else p for n, p in learner.params.items()}
                results[sync, mode] = (stats, {n: p.detach().clone() for n, p in full.items()})
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_data_parallel_ranks_equal_one_process(model_and_batch, tmp_path):
    model, batch = model_and_batch
    torch.multiprocessing.spawn(
        _data_parallel_rank, args=(2, str(tmp_path / "init"), batch, str(tmp_path)), nprocs=2, join=True
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for mode in MODES:
        whole_stats, _, whole_params = _update(model, batch, mode, len(batch))
        for sync in SYNCS:
            for stats, params in (r[sync, mode] for r in ranks):
                assert _max_abs_diff(params, whole_params) <= 1e-5, (sync, mode)
                # The norm is taken after averaging, so every rank sees the global gradient's norm.
                assert stats["grad_norm"] == pytest.approx(whole_stats["grad_norm"], rel=1e-5), (sync, mode)
            # The ranks' loss shares add up to the whole mini-batch's loss.
            shares = sum(r[sync, mode][0]["loss"] for r in ranks)
            assert shares == pytest.approx(whole_stats["loss"], abs=1e-5), (sync, mode)
