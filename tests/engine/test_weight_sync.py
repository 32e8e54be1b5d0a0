"""The weight seam on a tiny random Llama (fast): the trainer's ``push_weights`` moves a learner's
tensors into a policy; sharing a module copies nothing; merged LoRA weights equal peft's merge; a
push of one adapter leaves the other role's rollouts alone."""

from __future__ import annotations

import copy

import pytest
import torch

from codea1.config import EngineConfig
from codea1.engine.base import push_weights
from codea1.engine.hf_local.roles import with_adapters
from codea1.engine.hf_local.weights import MergedAdapterRollout, ModuleRollout, copy_into
from codea1.engine.lora import base_weights, lora_deltas, merged_weights, plain_name


def tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


class _Learner:
    """The learner side of the seam, reduced to what ``push_weights`` reads."""

    def __init__(self, tensors: dict[str, torch.Tensor], adapter: str | None = None) -> None:
        self.tensors, self.adapter = tensors, adapter

    def named_weights(self) -> dict[str, torch.Tensor]:
        return self.tensors


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([[1, 5, 9, 11, 3]])).logits


def test_a_policy_on_the_learners_own_module_copies_nothing():
    model = tiny_llama()
    own = {n: p.detach() for n, p in model.named_parameters()}
    assert copy_into(model, own) == 0
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    rollout = ModuleRollout(other)
    assert not torch.equal(_logits(other), _logits(model))
    push_weights(_Learner(own), _policy(rollout))
    assert torch.equal(_logits(other), _logits(model))
    with pytest.raises(KeyError, match="no parameter"):
        copy_into(other, {"not.a.weight": torch.zeros(1)})
    with pytest.raises(TypeError, match="load_weights"):
        rollout.load_adapter("coder", {})


def _policy(rollout):
    class _Policy:  # the policy side of the seam, reduced to the two load methods
        def load_weights(self, w):
            rollout.load_weights(w)

        def load_adapter(self, role, w):
            rollout.load_adapter(role, w)

    return _Policy()


def _adapted(names=("coder", "tester")):
    cfg = EngineConfig(lora_r=4, lora_alpha=8, lora_targets=("q_proj", "v_proj", "down_proj"))
    peft_model = with_adapters(tiny_llama(), cfg, list(names))
    with torch.no_grad():  # B starts at 0; give every adapter its own non-zero update
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5 if ".coder." in n else 0.3)
    return cfg, peft_model


def _adapter_tensors(peft_model, role):
    return {n: p.detach() for n, p in peft_model.named_parameters() if f".{role}." in n and "lora_" in n}


def test_merged_weights_equal_pefts_own_merge():
    cfg, peft_model = _adapted()
    base = base_weights(peft_model)
    assert "model.layers.0.self_attn.q_proj.weight" in base and not any("lora" in n for n in base)
    assert plain_name("base_model.model.model.layers.1.mlp.down_proj.base_layer.weight") == (
        "model.layers.1.mlp.down_proj.weight"
    )
    merged = merged_weights(base, _adapter_tensors(peft_model, "coder"), "coder", cfg.lora_scale)
    assert len(merged) == 2 * 3
    peft_model.set_adapter("coder")
    reference = copy.deepcopy(peft_model).merge_and_unload()
    for name, value in merged.items():
        assert torch.allclose(value, dict(reference.named_parameters())[name], atol=1e-6), name
    with pytest.raises(ValueError, match="no LoRA tensors"):
        lora_deltas(_adapter_tensors(peft_model, "coder"), "tester", 1.0)


def test_pushing_one_adapter_leaves_the_other_role_untouched():
    cfg, peft_model = _adapted()
    plain = tiny_llama()  # a plain model with the same (seeded) base weights
    rollout = MergedAdapterRollout(plain, base_weights(peft_model), cfg.lora_scale)
    base_logits = _logits(rollout.model_for("tester"))

    def expected(role):
        peft_model.set_adapter(role)
        with torch.no_grad():
            return peft_model(torch.tensor([[1, 5, 9, 11, 3]])).logits

    push_weights(_Learner(_adapter_tensors(peft_model, "coder"), "coder"), _policy(rollout))
    assert torch.allclose(_logits(rollout.model_for("coder")), expected("coder"), atol=1e-5)
    assert torch.equal(_logits(rollout.model_for("tester")), base_logits)  # never pushed: the base
    push_weights(_Learner(_adapter_tensors(peft_model, "tester"), "tester"), _policy(rollout))
    assert torch.allclose(_logits(rollout.model_for("tester")), expected("tester"), atol=1e-5)
    coder_now = _logits(rollout.model_for("coder"))
    assert torch.allclose(coder_now, expected("coder"), atol=1e-5)  # the tester's push did not touch it
    with torch.no_grad():  # a later update of the learner is not seen until it is pushed
        for p in _adapter_tensors(peft_model, "coder").values():
            p.add_(0.1)
    rollout.model_for("tester")
    assert torch.equal(_logits(rollout.model_for("coder")), coder_now)


def test_the_vllm_kv_cache_is_sized_from_the_config_not_from_ram():
    from types import SimpleNamespace

    from codea1.config import load_config
    from codea1.engine.vllm_local import kv_cache_bytes

    smol = SimpleNamespace(
        num_attention_heads=9, num_key_value_heads=3, hidden_size=576, num_hidden_layers=30
    )
    cfg = load_config("tiny-cpu", ["tester.sampling.batch_size=16", "tester.sampling.max_prompt_tokens=1536"])
    per_token = 2 * 30 * 3 * 64 * 4  # K and V, layers, kv heads, head dim, fp32 bytes
    assert kv_cache_bytes(cfg, smol, torch.float32) == pytest.approx(
        16 * (1536 + 160) * per_token * 1.1, rel=1e-6
    )
    assert kv_cache_bytes(cfg, smol, torch.bfloat16) < kv_cache_bytes(cfg, smol, torch.float32)
    fixed = load_config("tiny-cpu", ["engine.vllm_kv_cache_gib=0.5"])
    assert kv_cache_bytes(fixed, smol, torch.float32) == 1 << 29


def test_rollout_engine_resolution():
    from codea1.config import EngineConfig
    from codea1.engine.build import rollout_engine
    from codea1.engine.vllm_local.available import vllm_import_error

    assert rollout_engine(EngineConfig(kind="scripted", rollout="vllm")) == ("scripted", "")
    assert rollout_engine(EngineConfig(rollout="transformers")) == ("transformers", "")
    assert rollout_engine(EngineConfig(rollout="vllm")) == ("vllm", "")
    name, why = rollout_engine(EngineConfig(rollout="auto"))
    assert (name, bool(why)) == (("transformers", True) if vllm_import_error() else ("vllm", False))
