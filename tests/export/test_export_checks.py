"""``codea1 export``: the model cache and the checkpoint's fit to its base are checked before any
model is loaded or a GGUF base de-quantised (issue 45, item 17). No model is loaded here: the bases
are a ``config.json`` alone (the GGUF test reads the demo GGUF's metadata, and is slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from codea1.config import EngineConfig
from tests.export.test_export import _fake_checkpoint, _leftovers, _refused


def _no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a checkpoint or de-quantising a GGUF fails loudly: a check must refuse before either."""
    import codea1.engine.hf_local as hf_local
    from codea1.engine import loading

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded before the arguments were checked")

    monkeypatch.setattr(hf_local, "load_checkpoint_model", loaded)
    monkeypatch.setattr(loading, "dequantize_gguf_to_cache", loaded)


@pytest.mark.parametrize("where", ["role dir", "checkpoint", "output"])
def test_a_cache_dir_inside_the_checkpoint_or_the_output_is_refused(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """``export --cache-dir ROLE_DIR`` wrote the de-quantised base (~0.5 GB) into the checkpoint."""
    _no_loading(monkeypatch)
    role = _fake_checkpoint(tmp_path)
    out = tmp_path / "out"
    cache = {"role dir": role, "checkpoint": role.parent / "cache", "output": out / "cache"}[where]
    before = sorted(p.name for p in role.parent.rglob("*"))
    err = _refused(["export", str(role), str(out), "--cache-dir", str(cache)], capsys)
    assert f"--cache-dir {cache} is inside the {'output' if where == 'output' else 'checkpoint'}" in err
    assert sorted(p.name for p in role.parent.rglob("*")) == before
    assert not out.exists() and not cache.exists() or cache == role


def _config_only_base(root: Path) -> Path:
    """A base model directory holding only a tiny Llama's config.json (no weights, no tokenizer)."""
    from transformers import LlamaConfig

    base = root / "base"
    LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=100).save_pretrained(str(base))  # fmt: skip
    return base


def _checkpoint_of(root: Path, base: str, tensors: dict[str, torch.Tensor], mode: str = "separate") -> Path:
    role = _fake_checkpoint(root, mode=mode, coder_model=base)
    save_file(tensors, str(role / "weights.safetensors"))
    return role


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        (
            {"model.layers.9.mlp.up_proj.weight": torch.zeros(64, 32)},
            "1 tensors it lacks, e.g. model.layers.9",
        ),
        (
            {"model.embed_tokens.weight": torch.zeros(200, 32)},
            "model.embed_tokens.weight: [200, 32] vs [100, 32]",
        ),
    ],
)
def test_a_checkpoint_of_another_model_is_refused_before_loading(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, tensors: dict, message: str
) -> None:
    """``export`` loaded (de-quantised) the base before finding that the checkpoint does not fit it."""
    _no_loading(monkeypatch)
    role = _checkpoint_of(tmp_path, str(_config_only_base(tmp_path)), tensors)
    err = _refused(["export", str(role), str(tmp_path / "out")], capsys)
    assert "does not fit base model" in err and message in err and "nothing was loaded or written" in err
    assert not (tmp_path / "out").exists() and _leftovers(tmp_path, tmp_path / "out") == []


def test_an_adapter_of_another_rank_is_refused_before_loading(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_loading(monkeypatch)
    name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.coder.weight"
    role = _checkpoint_of(
        tmp_path, str(_config_only_base(tmp_path)), {name: torch.zeros(3, 32)}, mode="adapters"
    )
    err = _refused(["export", str(role), str(tmp_path / "out")], capsys)
    assert f"{name}: [3, 32] vs [{EngineConfig().lora_r}, 32]" in err  # the run's lora_r, the default


def test_a_checkpoint_that_fits_passes_the_check(tmp_path: Path) -> None:
    from codea1.export import check_fits, plan_export

    tensors = {"model.embed_tokens.weight": torch.zeros(100, 32), "lm_head.weight": torch.zeros(100, 32)}
    role = _checkpoint_of(tmp_path, str(_config_only_base(tmp_path)), tensors)
    check_fits(plan_export(role, tmp_path / "out"))


@pytest.mark.slow
def test_a_gguf_base_is_not_dequantised_to_find_a_misfit(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.demo_model import require_demo_model

    gguf = require_demo_model() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    _no_loading(monkeypatch)
    role = _checkpoint_of(tmp_path, str(gguf), {"model.embed_tokens.weight": torch.zeros(7, 576)})
    err = _refused(
        ["export", str(role), str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")], capsys
    )
    assert "does not fit base model" in err and "model.embed_tokens.weight: [7, 576] vs [49152, 576]" in err
