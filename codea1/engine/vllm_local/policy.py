"""Rollouts through vLLM: one request per sample, each seeded from (call seed, prompt, sample).

:class:`VLLMRollout` owns one ``vllm.LLM`` and knows which weights it holds; :class:`VLLMPolicy`
is one role's view of it (``separate`` mode gives each role its own engine; ``adapters`` mode and
self-play share one). Weights arrive only through ``load_weights`` (full tensors, Hugging Face
names, partial allowed) and ``load_adapter`` (a role's LoRA tensors), and reach the engine through
vLLM's weight-transfer API (``transfer.Sender``) with the backend the engine was started with
(``weight_sync.select_backend``): on CPU codea1's ``codea1_buckets`` engine (in-process the tensors
themselves, one call; across processes bounded buckets in the engine's dtype), on CUDA vLLM's
``ipc`` (not yet run on a GPU). Either way vLLM's layer-wise reload restores the shapes of the
prepacked CPU layers, loads and repacks. Every sync is measured (``last_sync``, and
``sync_seconds`` / ``sync_bytes`` in the policy's ``last_stats``).

Imports: torch, vllm, core.seeds, engine.base, engine.host_memory, engine.lora, this package's transfer and
weight_sync.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from codea1.core.seeds import request_seed
from codea1.engine.base import ChatTemplatePrompts, Completion, SamplingParams
from codea1.engine.host_memory import release_free_heap
from codea1.engine.lora import lora_deltas, merged_weights
from codea1.engine.sleep_mode import EngineSleep, sleep_level
from codea1.engine.vllm_local.weight_sync import BUCKET_BYTES, BUCKETS_BACKEND


class VLLMRollout:
    """One vLLM engine and the weights it holds.

    ``base`` (``adapters`` mode) holds the frozen base weights under Hugging Face names (views of
    the learner's peft base, no copy); a role switch loads ``base + ΔW`` of the role's adapter into
    the engine (one merged-weights sync per switch). ``backend`` is the engine's weight-transfer
    backend (default: the one it was started with; ``codea1_buckets`` when it does not say).
    ``in_process`` engines take tensors directly; the others get them cast to ``dtype`` (default:
    the engine's own, bf16 on GPU), with ``codea1_buckets`` in buckets of at most ``bucket_bytes``.
    ``last_sync`` describes the latest sync: ``seconds``, ``bytes`` (of the tensors the engine
    received, in the dtype they travelled in), ``tensors`` and ``buckets`` (0 in-process: one call,
    no copy; 0 with ``ipc``).
    ``sleeps`` (an engine started with ``enable_sleep_mode`` beside learners on CUDA) lets
    ``sleeper`` put it to sleep, at level 2 when it holds full weights (every sync writes them all)
    and level 1 in ``adapters`` mode (``sleep_mode.sleep_level``); every sync and rollout wakes what
    it needs first, and a sync gives torch's cached blocks back to the GPU (the staging buffer, the
    cast copies) before the KV cache wakes.
    """

    def __init__(
        self,
        llm: Any,
        *,
        in_process: bool,
        base: Mapping[str, torch.Tensor] | None = None,
        lora_scale: float = 1.0,
        dtype: torch.dtype | None = None,
        bucket_bytes: int = BUCKET_BYTES,
        sleeps: bool = False,
        backend: str | None = None,
    ) -> None:
        self.llm = llm
        self.backend = backend or engine_backend(llm)
        self.sender: Any = None
        self.sleeper = EngineSleep(llm, enabled=sleeps, level=sleep_level(full_syncs=base is None))
        self.in_process = in_process
        self.base = base
        self.lora_scale = lora_scale
        self.dtype = dtype if dtype is not None else engine_dtype(llm)
        self.bucket_bytes = bucket_bytes
        self.adapters: dict[str, dict[str, torch.Tensor]] = {}
        self.versions: dict[str, int] = {}
        self.loaded: tuple[str, int] | None = None
        self.syncs = 0
        self.sync_seconds = 0.0
        self.last_sync: dict[str, float] = {}

    # ---- weights -----------------------------------------------------------------------------------

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Write full-model tensors (Hugging Face names; a subset updates only those) into the engine."""
        if self.base is not None:
            raise TypeError("this engine samples LoRA adapters on a frozen base; use load_adapter")
        self._reload(weights)

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Keep a snapshot of ``role``'s LoRA tensors; the engine gets them merged at the role's next
        rollout (nothing is sent now, so two roles pushed in a row cost one sync each, at use)."""
        if self.base is None:
            raise TypeError("this engine holds full weights; use load_weights")
        self.adapters[role] = {n: t.detach().to("cpu", copy=True) for n, t in weights.items()}
        self.versions[role] = self.versions.get(role, 0) + 1

    def activate(self, role: str) -> bool:
        """Make the engine hold ``role``'s weights (``adapters`` mode: merge and sync when stale);
        True when that took a sync."""
        if self.base is None:
            return False
        state = (role, self.versions.get(role, 0))
        if self.loaded == state:
            return False
        synced = True
        if role in self.adapters:
            self._reload(merged_weights(self.base, self.adapters[role], role, self.lora_scale))
        elif self.loaded is not None:  # back to the untouched base for a role never pushed
            names = {n for r, w in self.adapters.items() for n in lora_deltas(w, r, 1.0)}
            self._reload({n: self.base[n] for n in names})
        else:
            synced = False
        self.loaded = state
        return synced

    def _reload(self, weights: Mapping[str, torch.Tensor]) -> None:
        start = time.perf_counter()
        self.sleeper.wake_weights()  # asleep: the weights come back, the KV cache stays released
        sent, count = self._sender().send(weights, None if self.in_process else self.dtype)
        if self.base is None:
            self.sleeper.loaded()  # full weights: a level-2 wake's weights are defined again
        if self.sleeper.enabled:  # the send's staging buffer and casts, back to the GPU for the KV cache
            torch.cuda.empty_cache()
        self.sleeper.wake_kv_cache()  # then the KV cache (vLLM's order: weights, sync, kv_cache)
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
        seconds = time.perf_counter() - start
        self.syncs += 1
        self.sync_seconds += seconds
        self.last_sync = {
            "seconds": seconds, "bytes": float(sent), "tensors": float(len(weights)), "buckets": float(count),
        }  # fmt: skip

    def close(self) -> None:
        """Stop the engine: its engine core shut down and the engine dropped, so its rendezvous file
        (``$TMPDIR/vllm_dist_*``, a gloo file store) is removed now rather than left behind by a
        process that is killed (a Ray replica). The rollout cannot sample afterwards."""
        llm, self.llm, self.sender = self.llm, None, None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
        del llm
        gc.collect()

    def _sender(self) -> Any:
        """The trainer side of this engine's syncs (``transfer.Sender``), made at the first sync."""
        if self.sender is None:
            from codea1.engine.vllm_local.transfer import LLMClient, Sender, trainer_init_info

            buckets = self.backend == BUCKETS_BACKEND
            fields = {"in_process": self.in_process} if buckets else {}
            device = None if buckets else torch.device("cuda", torch.cuda.current_device())
            info = trainer_init_info(self.backend, bucket_bytes=self.bucket_bytes, **fields)
            self.sender = Sender(LLMClient(self.llm), info, device=device)
        return self.sender


def engine_backend(llm: Any) -> str:
    """The weight-transfer backend the engine was started with (``codea1_buckets`` when it does not
    say)."""
    vllm_config = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)
    config = getattr(vllm_config, "weight_transfer_config", None)
    backend = getattr(config, "backend", None)
    return backend if isinstance(backend, str) else BUCKETS_BACKEND


def engine_dtype(llm: Any) -> torch.dtype | None:
    """The dtype the engine's model runs in (None when the engine does not say)."""
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    dtype = getattr(config, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


class VLLMPolicy(ChatTemplatePrompts):
    """A :class:`~codea1.engine.base.Policy` for one role on a :class:`VLLMRollout`.

    Every sample is its own request seeded with :func:`~codea1.core.seeds.request_seed` of the
    call's seed, the prompt's index and the sample's index, so completions do not depend on batch
    size or on how requests are scheduled. Log-probs are vLLM's processed log-probs of the sampled
    tokens (the engine is built with ``logprobs_mode="processed_logprobs"``): ``log_softmax(logits /
    T)`` when ``top_p = 1`` and ``top_k = 0``; with truncation they are of the truncated
    distribution. ``last_stats`` has ``sequences``, ``new_tokens``, ``seconds``, ``tokens_per_s`` of
    the latest ``generate`` and, once weights have been sent, ``sync_seconds`` / ``sync_bytes`` of
    the latest sync of this role's weights into the engine (a ``load_weights``; in ``adapters`` mode
    the merge sent at the role's rollout, whose time ``seconds`` includes); ``last_sync`` holds all of
    that sync's figures (see :class:`VLLMRollout`).
    """

    name = "vllm"

    def __init__(self, rollout: VLLMRollout, tokenizer: Any, eos_ids: Sequence[int], role: str) -> None:
        self.rollout = rollout
        self.tokenizer = tokenizer
        self.eos_ids: frozenset[int] = frozenset(eos_ids)
        self.role = role
        self.last_stats: dict[str, float] = {}
        self.last_sync: dict[str, float] = {}

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Sample from these full weights from now on (sent to the engine now)."""
        self.rollout.load_weights(weights)
        self.last_sync = dict(self.rollout.last_sync)
        self.last_stats = {**self.last_stats, **sync_stats(self.last_sync)}

    def load_adapter(self, role: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Sample ``role`` from the base plus these LoRA tensors from now on."""
        self.rollout.load_adapter(role, weights)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        """Sample ``params.n`` completions per prompt; returned prompt-major (prompt 0's n first)."""
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        start = time.perf_counter()
        self.rollout.sleeper.wake()
        if self.rollout.activate(self.role):  # adapters mode: this role's merged weights were sent now
            self.last_sync = dict(self.rollout.last_sync)
        encoded = self.encode(prompts, params)
        items = [(i, j) for i in range(len(prompts)) for j in range(params.n)]
        requests = [TokensPrompt(prompt_token_ids=list(encoded[i])) for i, _ in items]
        sampling = [
            VLLMSamplingParams(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else -1,
                max_tokens=params.max_new_tokens,
                seed=None if params.seed is None else request_seed(params.seed, params.first_prompt + i, j),
                logprobs=0,
                stop_token_ids=sorted(self.eos_ids),
                detokenize=False,
            )
            for i, j in items
        ]
        outputs = self.rollout.llm.generate(requests, sampling, use_tqdm=False) if items else []
        out = [
            self._completion(i, encoded[i], o.outputs[0]) for (i, _), o in zip(items, outputs, strict=True)
        ]
        if self.rollout.in_process:  # the CPU engine's freed prefill buffers back to the system
            release_free_heap()
        seconds = time.perf_counter() - start
        new_tokens = sum(len(c.completion_ids) for c in out)
        self.last_stats = {
            "sequences": float(len(out)),
            "new_tokens": float(new_tokens),
            "seconds": seconds,
            "tokens_per_s": new_tokens / seconds if seconds > 0 else 0.0,
            **sync_stats(self.last_sync),
        }
        return out

    def encode(self, prompts: Sequence[str], params: SamplingParams) -> list[list[int]]:
        """The prompts' token ids, before anything is sampled (a subclass may refuse some)."""
        del params
        return [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]

    def _completion(self, prompt_index: int, prompt_ids: Sequence[int], output: Any) -> Completion:
        toks = list(output.token_ids)
        cut = next((t + 1 for t, tok in enumerate(toks) if tok in self.eos_ids), None)
        kept = toks if cut is None else toks[:cut]
        logprobs = [_sampled_logprob(step, tok) for step, tok in zip(output.logprobs, kept, strict=False)]
        return Completion(
            prompt_index=prompt_index,
            text=self.tokenizer.decode(kept, skip_special_tokens=True),
            prompt_ids=tuple(prompt_ids),
            completion_ids=tuple(kept),
            logprobs=tuple(logprobs),
            finished=cut is not None,
        )


def sync_stats(sync: Mapping[str, float]) -> dict[str, float]:
    """The ``last_stats`` keys of one weight sync: ``sync_seconds`` and ``sync_bytes``."""
    return {"sync_seconds": float(sync["seconds"]), "sync_bytes": float(sync["bytes"])} if sync else {}


def _sampled_logprob(step: Any, token: int) -> float:
    """The log-prob of ``token`` in one position's logprobs entry (a dict token id → Logprob)."""
    entry = step[token]
    return float(entry.logprob)
