"""Micro-batches cut by a token budget, shared-prompt rows under a length cap, and the update they give.

The cutting and row-building functions are pure and tested on lengths alone. The update test trains a
tiny random-init Llama (built in memory, fp32, SDPA) one step with the project's PPO-clip loss, KL and
entropy on, cut in every way the learner knows: one micro-batch, a sequence count, token budgets,
with and without shared prompts, and with a row cap that splits a prompt's samples over several
rows, and on two FSDP2 ranks whose halves make different micro-batch counts (``slow``: it spawns
them). The loss is normalised over the whole batch, so every cut gives the same update. Last, the
precision of the local learner: fp32 master weights under bf16 autocast (what it does on CUDA,
forced here on the CPU) against pure bf16 at the paper's lr.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import torch

from codea1.config import OptimConfig
from codea1.core.cuts import count_cuts, token_cuts
from codea1.core.losses import ADDITIVE_STATS, policy_loss
from codea1.engine.base import TrainBatch
from codea1.engine.hf_local import learner as learner_module
from codea1.engine.hf_local.learner import HFLearner, micro_batches
from codea1.engine.hf_local.logprobs import shared_rows, sharing_pays
from codea1.engine.hf_local.weights import FullWeights

A, B, C = (5, 9, 13, 2, 7, 11), (7, 3, 8), (21, 4, 6, 2, 30)
PROMPTS = [A, A, A, A, B, B, B, C]
COMPLETIONS = [(40, 41, 42, 43, 44), (45, 46, 47), (), (50, 51, 52, 53, 54, 55, 56), (33, 34), (35, 36, 37, 38, 39, 40), (41, 42, 43, 44), (60, 61, 62)]  # fmt: skip
"""Prompt-major, as the trainer gives them: 4 samples of A (one empty), 3 of B, C alone.
Sequence lengths: 11, 9, 6, 13, 5, 9, 7, 8."""
ADVANTAGES = [1.0, -0.5, 0.3, -1.5, 0.7, -0.2, 1.1, -0.9]
LR = 1e-3
TOL = 1e-5


# ---- the pure functions -------------------------------------------------------------------------


def test_token_cuts_edge_cases() -> None:
    assert token_cuts([], 100) == []
    assert token_cuts([5000], 100) == [range(0, 1)]  # longer than the budget: alone
    assert token_cuts([4, 4, 4], 12) == [range(0, 3)]  # exact fit
    assert token_cuts([4, 4, 4, 4], 12) == [range(0, 3), range(3, 4)]
    assert token_cuts([3, 200, 3, 3], 100) == [range(0, 1), range(1, 2), range(2, 4)]
    with pytest.raises(ValueError, match="budget"):
        token_cuts([1], 0)


def test_token_cuts_count_padded_tokens_greedily_in_order() -> None:
    lengths = [len(p) + len(c) for p, c in zip(PROMPTS, COMPLETIONS, strict=True)]
    assert lengths == [11, 9, 6, 13, 5, 9, 7, 8]
    cuts = token_cuts(lengths, 30)
    assert cuts == [range(0, 2), range(2, 4), range(4, 7), range(7, 8)]
    for cut in cuts:  # no cut over the budget, and none could take the next sequence
        assert len(cut) * max(lengths[i] for i in cut) <= 30
        if cut.stop < len(lengths):
            assert (len(cut) + 1) * max(lengths[i] for i in range(cut.start, cut.stop + 1)) > 30
    assert [i for cut in cuts for i in cut] == list(range(len(lengths)))
    assert token_cuts(lengths, 1) == [range(i, i + 1) for i in range(8)]
    assert token_cuts(lengths, 10**6) == [range(0, 8)]


def test_count_cuts_and_the_choice_between_them() -> None:
    assert count_cuts(0, 4) == [] and count_cuts(5, 2) == [range(0, 2), range(2, 4), range(4, 5)]
    lengths = [10, 10, 10]
    assert micro_batches(lengths, OptimConfig(micro_batch_size=2)) == [range(0, 2), range(2, 3)]
    by_tokens = OptimConfig(micro_batch_size=2, micro_batch_tokens=30)  # the budget replaces the count
    assert micro_batches(lengths, by_tokens) == [range(0, 3)]


def test_ranks_with_fewer_micro_batches_get_empty_fillers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rank runs as many passes as the rank with the most (here another rank has 4)."""

    def most_of_all_ranks(tensor: torch.Tensor, op: Any = None) -> None:
        tensor.fill_(max(int(tensor[0]), 4))

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    monkeypatch.setattr(torch.distributed, "all_reduce", most_of_all_ranks)
    cuts = micro_batches([10, 10, 10], OptimConfig(micro_batch_tokens=20))
    assert cuts == [range(0, 2), range(2, 3), range(3, 3), range(3, 3)]


def test_shared_rows_split_at_the_cap_with_the_prompt_in_each_row() -> None:
    lengths = [len(c) for c in COMPLETIONS]  # 5, 3, 0, 7 | 2, 6, 4 | 3
    assert shared_rows(PROMPTS, lengths) == [[0, 1, 2, 3], [4, 5, 6], [7]]
    # cap 12: A (6 tokens) + 5 = 11; + 3 would be 14, so a new row: A + 3 + 0, then A + 7 alone
    assert shared_rows(PROMPTS, lengths, 12) == [[0], [1, 2], [3], [4, 5], [6], [7]]
    assert shared_rows([A, A], [40, 40], 12) == [[0], [1]]  # each longer than the cap: alone
    assert shared_rows([], [], 12) == []


def test_sharing_pays_only_for_fewer_positions_and_a_mask_within_the_limit() -> None:
    prompts, comps = [len(p) for p in PROMPTS], [len(c) for c in COMPLETIONS]
    rows = shared_rows(PROMPTS, comps)
    assert sharing_pays(rows, prompts, comps)  # 3 rows x 21 = 63 positions, not 8 x 13 = 104
    assert not sharing_pays(rows, prompts, comps, max_mask_elements=3 * 21 * 21 - 1)
    assert sharing_pays(rows, prompts, comps, max_mask_elements=3 * 21 * 21)
    assert not sharing_pays([[0], [1]], [6, 6], [3, 3])  # no row holds two sequences
    # a short prompt with long completions plus another sequence: 2 rows x 42 > 3 x 22
    assert not sharing_pays([[0, 1], [2]], [2, 2, 2], [20, 20, 20])


# ---- the update ---------------------------------------------------------------------------------


def _tiny_llama(dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
        attn_implementation="sdpa",
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config).to(dtype).eval()


def _learner(model: torch.nn.Module, optim: OptimConfig, **options: Any) -> HFLearner:
    weights = FullWeights(model, keep_reference=False)
    return HFLearner(weights, optim, 1, temperature=1.0, pad_id=0, entropy=True, **options)


LOSS = functools.partial(policy_loss, kl_coef=0.1, entropy_coef=0.01)


BASE = {"lr": LR, "warmup_steps": 0, "weight_decay": 0.0, "grad_clip": 0.0}


@pytest.fixture(scope="module")
def model_and_batch() -> tuple[torch.nn.Module, TrainBatch]:
    model = _tiny_llama()
    batch = TrainBatch(list(PROMPTS), list(COMPLETIONS), list(ADVANTAGES))
    current = _learner(copy.deepcopy(model), OptimConfig(micro_batch_size=8)).logprobs(batch)
    g = torch.Generator().manual_seed(1)

    def shifted(scale: float) -> list[tuple[float, ...]]:
        return [tuple((torch.tensor(r) + scale * torch.randn(len(r), generator=g)).tolist()) for r in current]

    batch.old_logprobs, batch.ref_logprobs = shifted(0.4), shifted(0.2)  # ratios hit both clips
    return model, batch


def _update(model: torch.nn.Module, batch: TrainBatch, optim: OptimConfig, **options: Any) -> dict[str, Any]:
    """One train step on a copy of ``model``: its stats, gradients (read just before AdamW's step),
    weights after it, and the decoder rows of each pass (shape, whether a mask was given)."""
    learner = _learner(copy.deepcopy(model), optim, **options)
    grads: dict[str, torch.Tensor] = {}
    passes: list[tuple[tuple[int, ...], bool]] = []

    def keep_grads(*_: Any) -> None:
        grads.update({n: p.grad.detach().clone() for n, p in learner.params.items()})

    def keep_rows(_: Any, args: Any, kwargs: dict[str, Any]) -> None:
        passes.append((tuple(kwargs["input_ids"].shape), kwargs["attention_mask"] is not None))

    learner.optimizer.register_step_pre_hook(keep_grads)
    learner.weights.model.get_decoder().register_forward_pre_hook(keep_rows, with_kwargs=True)
    stats = learner.train_step(batch, LOSS)
    params = {n: p.detach().clone() for n, p in learner.params.items()}
    freed = all(p.grad is None for p in learner.params.values())
    return {"stats": stats, "grads": grads, "params": params, "passes": passes, "freed": freed}


@pytest.fixture(scope="module")
def whole(model_and_batch) -> dict[str, Any]:
    """The update of the whole batch in one micro-batch, one right-padded row per sequence (a token
    budget that holds it all: the memory-bounded layout, no mask)."""
    model, batch = model_and_batch
    return _update(model, batch, OptimConfig(**BASE, micro_batch_tokens=10**6), share_prompts=False)


def _gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[n] - b[n]).abs().max()) for n in a)


CUTS: dict[str, tuple[dict[str, int], dict[str, Any], list[tuple[tuple[int, int], bool]] | None]] = {
    "3 sequences": ({"micro_batch_size": 3}, {}, None),
    "3 sequences, one row each": ({"micro_batch_size": 3}, {"share_prompts": False}, None),
    # [0, 1] and [2, 3] share A, [4, 5, 6] share B: one masked row each; C alone, with no mask
    "30 tokens": ({"micro_batch_tokens": 30}, {}, [((1, 14), True), ((1, 13), True), ((1, 15), True), ((1, 8), False)]),
    "30 tokens, one row each": ({"micro_batch_tokens": 30}, {"share_prompts": False}, None),
    "1 token: one sequence each": ({"micro_batch_tokens": 1}, {}, None),
    # A in 3 rows, B in 2, C in 1 (see test_shared_rows_split_at_the_cap_with_the_prompt_in_each_row)
    "all, rows capped at 12": ({"micro_batch_tokens": 10**6}, {"max_row_tokens": 12}, [((6, 13), True)]),
    "all, no row cap": ({"micro_batch_tokens": 10**6}, {"max_row_tokens": 0}, [((3, 21), True)]),
}  # fmt: skip
"""Each cut: optim fields, learner options, and the decoder rows of its passes when checked."""


@pytest.mark.parametrize("name", list(CUTS))
def test_every_cut_gives_the_update_of_one_micro_batch(model_and_batch, whole, name: str) -> None:
    model, batch = model_and_batch
    optim_kw, options, rows = CUTS[name]
    cut = _update(model, batch, OptimConfig(**BASE, **optim_kw), **options)
    initial = {n: p.detach() for n, p in model.named_parameters()}
    assert _gap(whole["params"], initial) > LR / 2  # the step moved the weights
    assert _gap(cut["grads"], whole["grads"]) <= TOL, name
    assert _gap(cut["params"], whole["params"]) <= TOL, name
    for k in ("loss", *ADDITIVE_STATS):
        assert cut["stats"][k] == pytest.approx(whole["stats"][k], abs=TOL), (name, k)
    assert cut["stats"]["grad_norm"] == pytest.approx(whole["stats"]["grad_norm"], rel=1e-5)
    assert cut["freed"] and whole["freed"]  # gradients are set to None at the end of the step
    assert whole["passes"] == [((8, 13), False)]  # one right-padded row each, causal, no mask
    budget = optim_kw.get("micro_batch_tokens", 0)
    if budget:  # shared rows or not, no pass holds more positions than the budget (or one sequence)
        assert all(r * w <= max(budget, 13) for (r, w), _ in cut["passes"]), cut["passes"]
    if rows is not None:
        assert cut["passes"] == rows


def _token_budget_rank(rank: int, init_file: str, batch: TrainBatch, out_dir: str) -> None:
    """One of two FSDP2 ranks (the learner groups' sharding, ``fsdp.shard``), its half of the batch
    cut by a 20-token budget: rank 0's A samples make 3 micro-batches, rank 1's B and C make 2."""
    from codea1.engine.hf_local.fsdp import shard

    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        model = shard(_tiny_llama())
        learner = _learner(model, OptimConfig(**BASE, micro_batch_tokens=20))
        half = slice(0, 4) if rank == 0 else slice(4, 8)
        assert batch.old_logprobs is not None and batch.ref_logprobs is not None
        part = TrainBatch(
            batch.prompt_ids[half], batch.completion_ids[half], batch.advantages[half],
            batch.old_logprobs[half], batch.ref_logprobs[half],
        )  # fmt: skip
        stats = learner.train_step(part, LOSS)
        params = {n: p.full_tensor().detach().clone() for n, p in learner.params.items()}
        torch.save((stats, params), f"{out_dir}/rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_token_budgets_on_two_ranks_give_the_one_process_update(model_and_batch, whole, tmp_path) -> None:
    """Ranks with different micro-batch counts stay in lockstep (filler passes) and together take
    the one-process step."""
    _, batch = model_and_batch
    budget = OptimConfig(micro_batch_tokens=20)
    assert len(micro_batches([11, 9, 6, 13], budget)) == 3 and len(micro_batches([5, 9, 7, 8], budget)) == 2
    torch.multiprocessing.spawn(
        _token_budget_rank, args=(str(tmp_path / "init"), batch, str(tmp_path)), nprocs=2, join=True
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for _, params in ranks:
        assert _gap(params, whole["params"]) <= TOL
    assert sum(stats["loss"] for stats, _ in ranks) == pytest.approx(whole["stats"]["loss"], abs=TOL)


# ---- precision: fp32 master weights with bf16 compute ------------------------------------------


def test_master_weights_on_cuda_bf16_only() -> None:
    compute = learner_module.master_weights_compute_dtype
    assert compute(torch.device("cuda"), torch.bfloat16) == torch.bfloat16
    assert compute(torch.device("cuda", 0), torch.float32) is None
    assert compute(torch.device("cpu"), torch.bfloat16) is None  # a bf16 CPU run stays pure bf16
    assert compute(torch.device("cpu"), torch.float32) is None


def _changed_share(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    changed = sum(int((after[n].float() != before[n].float()).sum()) for n in before)
    return changed / sum(t.numel() for t in before.values())


@pytest.mark.parametrize("master", [True, False])
def test_fp32_master_weights_move_nearly_every_weight_at_lr_1e6(model_and_batch, master: bool) -> None:
    """A bf16 model trained at the paper's lr: with fp32 master weights and bf16 autocast (forced
    here on the CPU; the learner does it on CUDA) one AdamW step moves > 90 % of the weights; pure
    bf16 rounds most of the step away."""
    _, batch = model_and_batch
    model = _tiny_llama(torch.bfloat16)
    weights = FullWeights(model, keep_reference=True)
    optim = OptimConfig(lr=1e-6, warmup_steps=0, micro_batch_size=3)
    learner = HFLearner(
        weights, optim, 1, temperature=1.0, pad_id=0, compute_dtype=torch.bfloat16 if master else None
    )
    expected = torch.float32 if master else torch.bfloat16
    assert {p.dtype for p in learner.params.values()} == {expected}
    assert {p.dtype for p in weights.reference.parameters()} == {torch.bfloat16}  # frozen: as loaded
    before = {n: p.detach().clone() for n, p in learner.params.items()}
    grad_dtypes: set[torch.dtype] = set()
    learner.optimizer.register_step_pre_hook(
        lambda *_: grad_dtypes.update(p.grad.dtype for p in learner.params.values())
    )
    batch = TrainBatch(batch.prompt_ids, batch.completion_ids, batch.advantages)
    batch.ref_logprobs = learner.logprobs(batch, reference=True)
    stats = learner.train_step(batch, LOSS)
    assert stats["skipped"] == 0.0 and grad_dtypes == {expected}
    share = _changed_share(before, {n: p.detach() for n, p in learner.params.items()})
    if master:
        assert share > 0.9, share
        assert all(s["exp_avg"].dtype == torch.float32 for s in learner.optimizer.state.values())
    else:
        assert share < 0.5, share


def test_from_config_keeps_the_cpu_dtype() -> None:
    from codea1.config import EngineConfig, LossConfig

    for dtype, torch_dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        model = _tiny_llama(torch_dtype)
        engine = EngineConfig(dtype=dtype, device="cpu")
        learner = HFLearner.from_config(
            FullWeights(model, keep_reference=False), OptimConfig(), 1, engine, LossConfig(),
            temperature=1.0, pad_id=0,
        )  # fmt: skip
        assert learner.compute_dtype is None
        assert {p.dtype for p in learner.params.values()} == {torch_dtype}


def test_a_reference_copied_in_the_compute_dtype_keeps_its_ties_and_values() -> None:
    """``FullWeights(reference_dtype=bf16)`` copies an fp32 model's reference straight into bf16 (what
    a learner rank shards), with its tied embedding still tied, leaving the trained model alone."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    weights = FullWeights(model, keep_reference=True, reference_dtype=torch.bfloat16)
    ref = weights.reference
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert all(p.requires_grad for p in model.parameters())
    assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
    assert not any(p.requires_grad for p in ref.parameters()) and not ref.training
    assert ref.lm_head.weight is ref.model.embed_tokens.weight  # still tied
    for (name, p), (_, r) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        assert torch.equal(r, p.detach().to(torch.bfloat16)), name
        assert r.data_ptr() != p.data_ptr()


def test_without_a_token_budget_on_cpu_the_layout_is_the_unbounded_one() -> None:
    # longer completions than prompts: bounded, one row per sequence takes fewer positions
    assert not sharing_pays([[0, 1], [2]], [2, 2, 2], [20, 20, 20])
    assert sharing_pays([[0, 1], [2]], [2, 2, 2], [20, 20, 20], bounded=False)
    assert not sharing_pays([[0], [1]], [6, 6], [3, 3], bounded=False)  # still: no row holds two


def test_the_learner_bounds_its_rows_on_cuda_or_with_a_token_budget(model_and_batch) -> None:
    model, _ = model_and_batch
    assert not _learner(copy.deepcopy(model), OptimConfig(micro_batch_size=4)).bounded_rows  # CPU
    assert _learner(copy.deepcopy(model), OptimConfig(micro_batch_tokens=64)).bounded_rows
