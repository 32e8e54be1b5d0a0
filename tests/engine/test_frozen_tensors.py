"""An in-process engine's frozen embedding and head are the learner's tensors, never a written copy.

The worker here is a stand-in with vLLM's shapes (``model.embed_tokens``, ``lm_head``, each with the
``cpu_linear`` closure vLLM's CPU layers carry); the real engine is checked in
``test_vllm_engine.py::test_adapters_one_engine_serves_both_roles_and_a_push_moves_one``.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from codea1.engine.vllm_local.frozen_tensors import EMBEDDING, HEAD, share_frozen_tensors

VOCAB, HIDDEN = 32, 8


class PackedKernel:
    """What vLLM's oneDNN handler looks like from Python: an object holding ``handler_tensor``."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.handler_tensor = weight.t().contiguous()


def vocab_layer(weight: torch.Tensor) -> torch.nn.Module:
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)
    kernel = PackedKernel(weight)
    layer.cpu_linear = lambda x, w, b: x @ kernel.handler_tensor
    return layer


def stand_in_worker(base: dict[str, torch.Tensor], *, tied: bool) -> SimpleNamespace:
    model = torch.nn.Module()
    model.model = torch.nn.Module()
    model.model.embed_tokens = vocab_layer(base[EMBEDDING])
    model.lm_head = vocab_layer(base[HEAD] if HEAD in base else base[EMBEDDING])
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    return SimpleNamespace(model_runner=SimpleNamespace(get_model=lambda: model))


def model_of(worker: SimpleNamespace) -> torch.nn.Module:
    return worker.model_runner.get_model()


def untied_base() -> dict[str, torch.Tensor]:
    return {EMBEDDING: torch.randn(VOCAB, HIDDEN), HEAD: torch.randn(VOCAB, HIDDEN)}


def test_untied_embedding_and_head_become_the_base_and_the_unused_kernel_goes():
    base = untied_base()
    worker = stand_in_worker(base, tied=False)
    model = model_of(worker)
    head_kernel = model.lm_head.cpu_linear
    released = share_frozen_tensors(worker, base, adapted=set())
    assert model.model.embed_tokens.weight.data_ptr() == base[EMBEDDING].data_ptr()
    assert model.lm_head.weight.data_ptr() == base[HEAD].data_ptr()
    assert model.lm_head.cpu_linear is head_kernel  # the head's packed matmul is what samples
    x = torch.randn(3, HIDDEN)
    assert torch.equal(model.model.embed_tokens.cpu_linear(x, base[EMBEDDING], None), x @ base[EMBEDDING].t())
    assert released == 3 * VOCAB * HIDDEN * 4  # two weights and one packed copy
    assert share_frozen_tensors(worker, base, adapted=set()) == 0  # already shared


def test_a_tied_head_keeps_its_kernel_and_follows_the_embedding():
    base = {EMBEDDING: torch.randn(VOCAB, HIDDEN)}
    worker = stand_in_worker(base, tied=True)
    model = model_of(worker)
    head_kernel = model.lm_head.cpu_linear
    share_frozen_tensors(worker, base, adapted=set())
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.lm_head.weight.data_ptr() == base[EMBEDDING].data_ptr()
    assert model.lm_head.cpu_linear is head_kernel


def test_nothing_a_lora_adapter_changes_is_shared():
    base = untied_base()
    worker = stand_in_worker(base, tied=False)
    model = model_of(worker)
    kernel = model.model.embed_tokens.cpu_linear
    share_frozen_tensors(worker, base, adapted={EMBEDDING, HEAD})
    assert model.model.embed_tokens.weight.data_ptr() != base[EMBEDDING].data_ptr()
    assert model.lm_head.weight.data_ptr() != base[HEAD].data_ptr()
    assert model.model.embed_tokens.cpu_linear is kernel
    model.lm_head.weight.data.zero_()  # a reload writing the head leaves the learner's base alone
    assert base[HEAD].abs().sum() > 0


def test_a_different_dtype_or_padded_vocabulary_is_left_alone():
    base = untied_base()
    worker = stand_in_worker(base, tied=False)
    model = model_of(worker)
    model.lm_head.weight.data = model.lm_head.weight.data.to(torch.bfloat16)
    model.model.embed_tokens.weight.data = torch.zeros(VOCAB + 64, HIDDEN)
    share_frozen_tensors(worker, base, adapted=set())
    assert model.lm_head.weight.dtype == torch.bfloat16
    assert model.lm_head.weight.data_ptr() != base[HEAD].data_ptr()
    assert model.model.embed_tokens.weight.shape[0] == VOCAB + 64
