"""Model resolution and loading errors (fast), and the GGUF → safetensors cache (slow)."""

from __future__ import annotations

import os

import pytest

from codea1.engine.loading import (
    SMOLLM2_SPEC,
    ModelLoadError,
    cpu_has_native_bf16,
    default_cache_dir,
    load_model_and_tokenizer,
    load_tokenizer,
    pick_device,
    pick_dtype,
    resolve_model,
)
from tests.demo_model import require_demo_model


def test_missing_path_names_the_path(tmp_path):
    missing = tmp_path / "nope" / "model.gguf"
    with pytest.raises(ModelLoadError, match="nope/model.gguf"):
        resolve_model(str(missing))


def test_directory_without_config_says_what_was_looked_for(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "x.bin").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="not a .gguf"):
        resolve_model(str(tmp_path / "x.bin"))


def test_resolution_kinds(tmp_path):
    assert resolve_model("Qwen/Qwen2.5-Coder-0.5B-Instruct").kind == "hub"
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert resolve_model(str(tmp_path)).kind == "gguf"  # a directory holding exactly one .gguf
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)).kind == "directory"


def test_smollm2_is_found_inside_its_package():
    require_demo_model()
    src = resolve_model(SMOLLM2_SPEC)
    assert src.kind == "gguf" and src.location.endswith(".gguf") and os.path.isfile(src.location)


def test_dtype_and_device_choice(monkeypatch):
    import torch

    from codea1.engine import loading

    monkeypatch.setattr(loading, "cpu_has_native_bf16", lambda: False)
    assert pick_dtype("auto", torch.device("cpu")) == torch.float32
    monkeypatch.setattr(loading, "cpu_has_native_bf16", lambda: True)
    assert pick_dtype("auto", torch.device("cpu")) == torch.bfloat16
    assert pick_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert pick_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        pick_dtype("int3", torch.device("cpu"))
    assert pick_device("cpu").type == "cpu"
    monkeypatch.setenv("CODEA1_CACHE", "/some/where")
    assert str(default_cache_dir()) == "/some/where/models"


def _tiny_tokenizer_dir(path, chat_template: str | None):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1, "hello": 2, "world": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    if chat_template:
        fast.chat_template = chat_template
    fast.save_pretrained(path)
    return path


def test_tokenizer_without_chat_template_is_a_clear_error(tmp_path):
    d = _tiny_tokenizer_dir(tmp_path / "tok", None)
    with pytest.raises(ModelLoadError, match="no chat template"):
        load_tokenizer(str(d))


def test_tokenizer_gets_eos_as_pad_and_left_padding(tmp_path):
    d = _tiny_tokenizer_dir(tmp_path / "tok", "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    tok = load_tokenizer(str(d))
    assert tok.pad_token_id == tok.eos_token_id == 1
    assert tok.padding_side == "left"


@pytest.mark.slow
def test_gguf_is_dequantized_once_and_cached(tmp_path):
    require_demo_model()
    cache = tmp_path / "cache"
    model, tok = load_model_and_tokenizer(SMOLLM2_SPEC, "float32", "cpu", str(cache))
    entries = [p for p in cache.iterdir() if p.name.startswith("SmolLM2")]
    assert len(entries) == 1 and (entries[0] / "config.json").is_file()
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temp dirs left behind
    assert getattr(model, "hf_quantizer", None) is None or model.hf_quantizer is None
    assert all(p.requires_grad for p in model.parameters())
    assert tok.chat_template and tok.padding_side == "left"
    again, _ = load_model_and_tokenizer(SMOLLM2_SPEC, "bfloat16", "cpu", str(cache))
    import torch

    assert again.dtype == torch.bfloat16
    w0 = model.get_input_embeddings().weight
    assert torch.allclose(w0, again.get_input_embeddings().weight.float(), atol=1e-2)


def test_native_bf16_is_read_from_the_cpu_flags():
    plain = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n"
    assert not cpu_has_native_bf16(plain)
    assert cpu_has_native_bf16(plain.replace("avx512bw", "avx512bw avx512_bf16"))
    assert cpu_has_native_bf16(plain.replace("avx512bw", "amx_tile amx_bf16"))
    assert not cpu_has_native_bf16("model name\t: avx512_bf16 in a name only\n")
    assert isinstance(cpu_has_native_bf16(), bool)  # this machine's /proc/cpuinfo (or False without one)
