"""Evaluating a trained checkpoint: ``load_policy`` on a role directory loads the trained weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from codea1.config import EngineConfig, RunConfig, config_from_dict, dump_config
from tests.demo_model import require_demo_model

require_demo_model()
pytestmark = pytest.mark.slow

ENGINE = EngineConfig(coder_model="smollm2-135m", dtype="float32", device="cpu")


def _checkpoint(tmp_path: Path, mode: str) -> Path:
    cfg: RunConfig = config_from_dict({"engine": {"coder_model": "smollm2-135m", "mode": mode}})
    step = tmp_path / "checkpoints" / "step_000001"
    (step / "coder").mkdir(parents=True)
    dump_config(cfg, step / "config.yaml")
    return step / "coder"


def test_separate_mode_checkpoint_weights_are_loaded(tmp_path: Path) -> None:
    from codea1.engine.hf_local import load_policy
    from codea1.engine.loading import load_model_and_tokenizer

    base, _ = load_model_and_tokenizer("smollm2-135m", "float32", "cpu")
    name = "model.layers.0.self_attn.q_proj.weight"
    trained = dict(base.named_parameters())[name].detach().clone() + 0.5
    role_dir = _checkpoint(tmp_path, "separate")
    save_file({name: trained.contiguous()}, str(role_dir / "weights.safetensors"))

    policy = load_policy(str(role_dir), ENGINE)
    model = policy.rollout.model_for(policy.role)
    params = dict(model.named_parameters())
    assert torch.equal(params[name], trained)
    other = "model.layers.1.self_attn.q_proj.weight"
    assert torch.equal(params[other], dict(base.named_parameters())[other])
    assert not any(p.requires_grad for p in model.parameters())


def test_adapters_mode_checkpoint_is_merged_into_the_base(tmp_path: Path) -> None:
    from codea1.engine.hf_local import load_policy
    from codea1.engine.hf_local.roles import with_adapters
    from codea1.engine.loading import load_model_and_tokenizer

    base, _ = load_model_and_tokenizer("smollm2-135m", "float32", "cpu")
    reference = dict(base.named_parameters())["model.layers.0.self_attn.q_proj.weight"].detach().clone()
    trained_cfg = config_from_dict({"engine": {"coder_model": "smollm2-135m", "mode": "adapters"}}).engine
    peft_model = with_adapters(base, trained_cfg, ["coder"])
    lora = {
        n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_" in n and ".coder." in n
    }
    for n in lora:
        if "lora_B" in n:
            lora[n] += 0.01  # a trained adapter has a non-zero B
    role_dir = _checkpoint(tmp_path, "adapters")
    save_file({n: t.contiguous() for n, t in lora.items()}, str(role_dir / "weights.safetensors"))

    loaded = load_policy(str(role_dir), ENGINE)
    model = loaded.rollout.model_for(loaded.role)
    merged = dict(model.named_parameters())["model.layers.0.self_attn.q_proj.weight"]
    assert not any("lora_" in n for n, _ in model.named_parameters())
    assert not torch.allclose(merged, reference)


def test_checkpoint_that_does_not_fit_the_base_is_a_clear_error(tmp_path: Path) -> None:
    from codea1.engine.hf_local import load_policy
    from codea1.engine.loading import ModelLoadError

    role_dir = _checkpoint(tmp_path, "separate")
    save_file({"no.such.tensor": torch.zeros(2)}, str(role_dir / "weights.safetensors"))
    with pytest.raises(ModelLoadError, match="does not fit"):
        load_policy(str(role_dir), ENGINE)
