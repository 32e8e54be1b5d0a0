"""A tiny random-init Llama with SmolLM2's tokenizer and chat template, saved as a model directory.

Small enough for seconds per step on 2 CPU cores (2 layers, hidden 128), yet shaped so that
vLLM's CPU attention accepts it (head dim 64) and long enough for the presets' prompts.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.demo_model import require_demo_model


def make_tiny_model(directory: Path, seed: int = 0) -> Path:
    """Write the tiny model and the SmolLM2 tokenizer into ``directory`` and return it."""
    require_demo_model()
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from codea1.engine.loading import SMOLLM2_SPEC, default_cache_dir, dequantize_gguf_to_cache, resolve_model

    smollm2 = dequantize_gguf_to_cache(Path(resolve_model(SMOLLM2_SPEC).location), default_cache_dir())
    tok = AutoTokenizer.from_pretrained(str(smollm2))
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        LlamaForCausalLM(config).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory
