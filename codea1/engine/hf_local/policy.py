"""Batched, left-padded sampling with transformers ``generate`` (the rollout side of the engine).

Prompts are sorted by token length (longest first) so each batch carries little padding; results
come back prompt-major. Each completion carries the sampling log-probs of its tokens, recorded
during generation (no second forward pass). Seeded calls run inside a forked RNG so the global
state is untouched and the same prompts, parameters and batch size give the same completions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
from transformers import GenerationConfig, LogitsProcessorList

from codea1.core.seeds import batch_seed
from codea1.engine.base import ChatTemplatePrompts, Completion, SamplingParams
from codea1.engine.hf_local.logprobs import SampledTokenLogprobs
from codea1.engine.host_memory import release_free_heap


class Rollout(Protocol):
    """What a policy samples from (``weights.py``: a plain module, a merged copy, peft layers)."""

    def model_for(self, role: str) -> Any: ...

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None: ...

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None: ...


def eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The token ids that end a completion: the model's generation config's and the tokenizer's."""
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return frozenset(ids)


class HFPolicy(ChatTemplatePrompts):
    """A :class:`~codea1.engine.base.Policy` over a transformers causal LM.

    ``rollout`` holds the module to sample from for ``role`` (it may merge adapter weights first).
    ``last_stats`` describes the latest :meth:`generate` call: ``sequences``, ``new_tokens``
    (kept completion tokens), ``padded_tokens`` (batch × steps actually computed), ``seconds``,
    ``tokens_per_s``.
    """

    name = "transformers"

    def __init__(self, rollout: Rollout, tokenizer: Any, batch_size: int = 16, role: str = "coder") -> None:
        self.rollout = rollout
        self.role = role
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.last_stats: dict[str, float] = {}
        self.eos_ids: frozenset[int] = eos_ids(rollout.model_for(role), tokenizer)

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Sample from these full weights (the learner's own tensors are not copied)."""
        self.rollout.load_weights(weights)

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Sample ``role`` from the base plus these LoRA tensors."""
        self.rollout.load_adapter(role, weights)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        """Sample ``params.n`` completions per prompt; returned prompt-major (prompt 0's n first)."""
        start = time.perf_counter()
        encoded = [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
        items = [(i, j) for i in range(len(prompts)) for j in range(params.n)]
        order = sorted(range(len(items)), key=lambda k: -len(encoded[items[k][0]]))
        size = params.batch_size or self.batch_size
        results: list[Completion | None] = [None] * len(items)
        padded = 0
        model = self.rollout.model_for(self.role)
        for b, lo in enumerate(range(0, len(order), size)):
            idx = order[lo : lo + size]
            seed = None if params.seed is None else batch_seed(params.seed, b)
            batch, steps = self._generate_batch(model, [items[k][0] for k in idx], encoded, params, seed)
            padded += steps * len(idx)
            for k, comp in zip(idx, batch, strict=True):
                results[k] = comp
        out = [c for c in results if c is not None]
        if next(model.parameters()).device.type == "cpu":  # generation's freed buffers (host_memory.py)
            release_free_heap()
        seconds = time.perf_counter() - start
        new_tokens = sum(len(c.completion_ids) for c in out)
        self.last_stats = {
            "sequences": float(len(out)),
            "new_tokens": float(new_tokens),
            "padded_tokens": float(padded),
            "seconds": seconds,
            "tokens_per_s": new_tokens / seconds if seconds > 0 else 0.0,
        }
        return out

    def _generate_batch(
        self,
        model: Any,
        prompt_indices: list[int],
        encoded: list[list[int]],
        params: SamplingParams,
        seed: int | None,
    ) -> tuple[list[Completion], int]:
        device = next(model.parameters()).device
        pad = self.tokenizer.pad_token_id
        width = max(len(encoded[i]) for i in prompt_indices)
        ids = torch.full((len(prompt_indices), width), pad, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for row, i in enumerate(prompt_indices):
            n = len(encoded[i])
            ids[row, width - n :] = torch.tensor(encoded[i], dtype=torch.long)
            attn[row, width - n :] = 1
        config = GenerationConfig(
            do_sample=True,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=pad,
        )
        recorder = SampledTokenLogprobs(params.temperature)
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, enabled=seed is not None), torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            model.eval()
            sequences = model.generate(
                input_ids=ids.to(device),
                attention_mask=attn.to(device),
                generation_config=config,
                logits_processor=LogitsProcessorList([recorder]),
            )
        generated = sequences[:, width:].cpu()
        logprobs = recorder.finish(sequences)
        comps = []
        for row, i in enumerate(prompt_indices):
            toks = generated[row].tolist()
            cut = next((t + 1 for t, tok in enumerate(toks) if tok in self.eos_ids), None)
            kept = toks if cut is None else toks[:cut]
            comps.append(
                Completion(
                    prompt_index=i,
                    text=self.tokenizer.decode(kept, skip_special_tokens=True),
                    prompt_ids=tuple(encoded[i]),
                    completion_ids=tuple(kept),
                    logprobs=tuple(logprobs[row, : len(kept)].tolist()),
                    finished=cut is not None,
                )
            )
        return comps, generated.shape[1]
