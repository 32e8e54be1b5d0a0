"""The update side of the engine: log-probs, micro-batched train steps, AdamW, schedule, save/load.

``train_step`` is one optimizer step over the given (mini-)batch. The batch is cut into micro-batches
of ``micro_batch_size`` sequences, or by a token budget (``micro_batch_tokens``, :func:`token_cuts`);
each micro-batch's loss comes from ``loss_fn`` with the loss normaliser of the whole batch (response
tokens and sequences, counted once and summed over the data-parallel ranks when
``torch.distributed`` is initialised), so the accumulated gradient equals that of the whole batch at
once however it is cut into micro-batches and ranks. The learning rate warms up linearly for
``warmup_steps`` optimizer steps, then follows a half cosine down to ``min_lr_ratio × lr`` at
``total_steps``. Gradients are freed at the end of a step (and the CUDA cache emptied), so that an
engine sharing the device gets the memory back between updates.

Sharing a GPU with vLLM engines: ``before_work`` hooks run before the learner computes (the local
backend puts its engines to sleep there), and :meth:`HFLearner.offload` / :meth:`HFLearner.onload`
move the trained weights and AdamW state to host memory and back (the Ray ranks colocated with
replicas, while the replicas sample); the learner onloads itself before it computes.

Precision: bf16 weights on CUDA are trained with fp32 master weights (and fp32 AdamW state) and
bf16 compute under ``torch.autocast`` (:func:`master_weights_compute_dtype`), as the Ray learners do
with FSDP2 mixed precision; pure bf16 would round most updates at lr 1e-6 away. Elsewhere the
weights train in the dtype they were loaded in.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from codea1.config import EngineConfig, LossConfig, OptimConfig
from codea1.core.cuts import count_cuts, token_cuts
from codea1.core.losses import ADDITIVE_STATS, LossNormalizer, Weighting, stats_weighting
from codea1.engine.base import LossFn, TrainBatch
from codea1.engine.hf_local.logprobs import MAX_SHARED_ROW_TOKENS, padded_values, response_logprobs, scorer_of
from codea1.engine.hf_local.sharded_state import (
    DCP_DIR,
    SCHEDULER_FILE,
    barrier,
    full_tensors,
    is_sharded,
    load_full_optimizer,
    load_sharded_optimizer,
    load_weights_into,
    rank,
    save_sharded_optimizer,
)
from codea1.engine.host_memory import release_free_heap
from codea1.engine.loading import pick_device, pick_dtype

WEIGHTS_FILE = "weights.safetensors"
STATE_FILE = "optimizer.pt"


def global_normalizer(local: LossNormalizer, device: torch.device) -> tuple[LossNormalizer, int]:
    """The mini-batch's loss normaliser over all data-parallel ranks, and the number of ranks.

    When ``torch.distributed`` is initialised, its default group is taken as the learner's
    data-parallel group: the local counts are summed over it (one all-reduce). Otherwise the local
    counts are the whole mini-batch's and there is one rank.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return local, 1
    ranks = torch.distributed.get_world_size()
    if ranks == 1:
        return local, 1
    counts = torch.tensor([local.tokens, local.sequences], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(counts)
    return LossNormalizer(tokens=int(counts[0]), sequences=int(counts[1])), ranks


def micro_batches(
    lengths: Sequence[int], optim: OptimConfig, device: torch.device | None = None
) -> list[range]:
    """The micro-batches of a batch of sequences of ``lengths`` tokens, as index ranges: by
    ``optim.micro_batch_tokens`` (:func:`~codea1.core.cuts.token_cuts`) when it is set, else
    ``micro_batch_size`` sequences each (:func:`~codea1.core.cuts.count_cuts`).

    Under ``torch.distributed`` with sharded parameters every rank must run as many forward and
    backward passes as the others, so the count is the largest over the ranks; a rank with fewer
    gets empty ranges past its end, where the learner runs a filler pass that adds nothing.
    """
    if optim.micro_batch_tokens > 0:
        cuts = token_cuts(lengths, optim.micro_batch_tokens)
    else:
        cuts = count_cuts(len(lengths), optim.micro_batch_size)
    count = len(cuts)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        if torch.distributed.get_world_size() > 1:
            most = torch.tensor([count], dtype=torch.int64, device=device)
            torch.distributed.all_reduce(most, op=torch.distributed.ReduceOp.MAX)
            count = int(most[0])
    end = len(lengths)
    return cuts + [range(end, end)] * (count - len(cuts))


def master_weights_compute_dtype(device: torch.device, dtype: torch.dtype) -> torch.dtype | None:
    """The compute dtype of a learner that keeps fp32 master weights for weights loaded in ``dtype``
    on ``device``, or None to train the weights in their own dtype.

    bf16 on CUDA: fp32 master weights, bf16 autocast. On a CPU the weights keep their dtype: fp32
    where bf16 is not native (``engine.dtype: auto``), while a bf16 CPU run (asked for, or ``auto``
    on a CPU with native bf16) stays pure bf16 as before, at half the memory; there an AdamW step of
    about ``lr`` moves a weight ``w`` only where ``lr`` exceeds about ``|w| × 2⁻⁹``.
    """
    return torch.bfloat16 if device.type == "cuda" and dtype == torch.bfloat16 else None


def lr_factor(step: int, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """Multiplier of the base lr at optimizer step ``step`` (0-based): linear warm-up, half cosine."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / span))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class HFLearner:
    """A :class:`~codea1.engine.base.Learner` over one role's weights (see ``weights.py``).

    ``temperature`` must equal the sampling temperature of the role so that recomputed log-probs
    match the policy's. ``last_stats`` mirrors the dict returned by :meth:`train_step`.
    ``adapter`` names the LoRA adapter trained (``adapters`` mode), None for full weights.
    ``max_row_tokens`` caps a shared-prompt row (``logprobs.shared_rows``). With ``compute_dtype``
    (see :func:`master_weights_compute_dtype`; :meth:`from_config` decides it) the trainable
    parameters are made fp32 master weights, AdamW's state follows them, and every forward pass
    (trained weights and reference) runs under ``torch.autocast`` in that dtype; a frozen reference
    or base keeps its own dtype. Sharded parameters take their compute dtype from FSDP2 instead.
    """

    def __init__(
        self,
        weights: Any,
        optim: OptimConfig,
        total_steps: int,
        *,
        temperature: float,
        pad_id: int,
        logprob_chunk: int = 1024,
        share_prompts: bool = True,
        aggregation: str = "token-mean",
        entropy: bool = False,
        max_row_tokens: int = MAX_SHARED_ROW_TOKENS,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        self.weights = weights
        self.optim_cfg = optim
        self.temperature = temperature
        self.pad_id = pad_id
        self.logprob_chunk = logprob_chunk
        self.share_prompts = share_prompts
        self.max_row_tokens = max_row_tokens
        self.weighting: Weighting = stats_weighting(aggregation)
        self.entropy = entropy
        self.adapter: str | None = getattr(weights, "adapter", None)
        self.params = weights.trainable()
        if not self.params:
            raise ValueError("the role has no trainable parameters")
        device = next(iter(self.params.values())).device
        self.bounded_rows = optim.micro_batch_tokens > 0 or device.type == "cuda"
        """Memory-bounded row layouts (capped shared rows, masks within a limit, no mask for rows of
        one sequence) on CUDA or with a token budget; elsewhere the layout of earlier versions."""
        self.compute_dtype = compute_dtype
        if compute_dtype is not None:
            if any(is_sharded(p) for p in self.params.values()):
                raise ValueError("sharded parameters take their compute dtype from FSDP2 (fsdp.shard)")
            for p in self.params.values():  # before AdamW: its state takes the parameters' dtype
                if p.dtype != torch.float32:
                    p.data = p.data.float()
        self.optimizer = torch.optim.AdamW(
            list(self.params.values()), lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, optim.warmup_steps, total_steps, optim.min_lr_ratio)
        )
        self.last_stats: dict[str, float] = {}
        self.before_work: list[Callable[[], None]] = []
        """Called before the learner computes (the local backend: put the engines on its GPU to sleep)."""
        self.home: torch.device | None = None
        """Where the trained weights live while :meth:`offload` has them in host memory (else None)."""

    def _work(self) -> None:
        """Before computing: the ``before_work`` hooks, then the weights back from host memory."""
        for hook in self.before_work:
            hook()
        self.onload()

    def training_module(self) -> Any:
        """The module holding every trained parameter and the frozen ones beside them (the FSDP2
        root when sharded: moving it moves and re-registers every shard)."""
        return scorer_of(self.weights.train_model())

    def offload(self) -> None:
        """Move the trained model (with a frozen base in ``adapters`` mode) and AdamW's state to host
        memory and give the CUDA cache back; gradients are already freed (``train_step``). On a CPU,
        or when offloaded already, nothing happens. A reference sharded with FSDP2's
        ``CPUOffloadPolicy`` lives in host memory anyway."""
        device = next(iter(self.params.values())).device
        if self.home is not None or device.type != "cuda":
            return
        self.training_module().to("cpu")
        move_optimizer_state(self.optimizer, torch.device("cpu"))
        self.home = device
        torch.cuda.empty_cache()

    def onload(self) -> None:
        """Bring back what :meth:`offload` moved (nothing when it did not)."""
        if self.home is None:
            return
        self.training_module().to(self.home)
        move_optimizer_state(self.optimizer, self.home)
        self.home = None

    @classmethod
    def from_config(
        cls,
        weights: Any,
        optim: OptimConfig,
        total_steps: int,
        engine: EngineConfig,
        loss: LossConfig,
        *,
        temperature: float,
        pad_id: int,
    ) -> HFLearner:
        """The learner a run's configuration asks for: log-prob chunking and prompt sharing from
        ``engine``, micro-batch weighting and entropy from ``loss`` (every backend builds it here),
        and fp32 master weights where ``engine.dtype`` is bf16 on CUDA
        (:func:`master_weights_compute_dtype`; the Ray ranks load fp32 and shard with FSDP2 mixed
        precision instead, so they pass ``engine.dtype`` float32 here)."""
        params = weights.trainable()
        if not params:
            raise ValueError("the role has no trainable parameters")
        device = pick_device(engine.device)  # where the role's model was loaded
        compute = master_weights_compute_dtype(device, pick_dtype(engine.dtype, device))
        return cls(
            weights, optim, total_steps, temperature=temperature, pad_id=pad_id,
            logprob_chunk=engine.logprob_chunk, share_prompts=engine.share_prompts,
            aggregation=loss.aggregation, entropy=loss.needs_entropy, compute_dtype=compute,
        )  # fmt: skip

    def logprobs(self, batch: TrainBatch, reference: bool = False) -> list[tuple[float, ...]]:
        """Per-token log-probs of each completion (reference model when ``reference``), no grad."""
        self._work()
        out: list[tuple[float, ...]] = []
        with torch.no_grad():
            device = next(self.weights.train_model().parameters()).device
            for cut in micro_batches(_lengths(batch), self.optim_cfg, device):
                part = batch.slice(cut.start, cut.stop)
                prompts, comps = part.prompt_ids, part.completion_ids
                filler = not comps  # this rank's share ran out (see micro_batches)
                if filler:
                    prompts, comps = [(self.pad_id,)], [(self.pad_id,)]
                if reference:
                    with self.weights.reference_model() as model:
                        lp, _, _ = self._score(model, prompts, comps, with_grad=False)
                else:
                    lp, _, _ = self._score(self.weights.train_model(), prompts, comps, with_grad=False)
                if not filler:
                    out.extend(tuple(lp[i, : len(c)].tolist()) for i, c in enumerate(comps))
        if device.type == "cpu":
            release_free_heap()
        return out

    def _score(self, model: Any, prompts: Any, comps: Any, with_grad: bool) -> Any:
        device = next(model.parameters()).device
        precision = (
            contextlib.nullcontext()
            if self.compute_dtype is None
            else torch.autocast(device.type, dtype=self.compute_dtype)
        )
        with precision:
            return response_logprobs(
                model,
                prompts,
                comps,
                pad_id=self.pad_id,
                temperature=self.temperature,
                chunk=self.logprob_chunk,
                with_grad=with_grad,
                share_prompts=self.share_prompts,
                max_row_tokens=self.max_row_tokens,
                bounded=self.bounded_rows,
            )

    def train_step(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step over ``batch``; returns loss, grad_norm, lr, tokens, seconds and loss_fn stats.

        Missing ``old_logprobs`` are the current weights' own: each micro-batch's forward pass, detached
        (ratio 1, as a recomputation before the step would give, without its extra pass).
        The loss normaliser is counted once over the whole batch (summed over the data-parallel
        ranks, see :func:`global_normalizer`) and passed to every micro-batch's ``loss_fn``.
        A non-finite gradient norm skips the optimizer step (``skipped`` = 1). The gradients are
        set to None before it returns: to read them, register an ``optimizer`` step pre-hook
        (``torch.optim.Optimizer.register_step_pre_hook``), which sees them clipped.
        """
        start = time.perf_counter()
        self._work()
        model = self.weights.train_model()
        device = next(model.parameters()).device
        local = LossNormalizer.of_lengths(len(c) for c in batch.completion_ids)
        normalizer, ranks = global_normalizer(local, device)
        if normalizer.tokens == 0:
            raise ValueError("train_step needs at least one completion token")
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.zero_grad(set_to_none=True)
        model.train()
        loss_sum, sums = 0.0, {}
        try:
            for cut in micro_batches(_lengths(batch), self.optim_cfg, device):
                part = batch.slice(cut.start, cut.stop)
                comps = part.completion_ids
                if not comps:  # a filler pass: sharded layers need every rank's forward and backward
                    lp, _, _ = self._score(model, [(self.pad_id,)], [(self.pad_id,)], with_grad=True)
                    (lp.sum() * 0.0).backward()
                    continue
                lp, ent, mask = self._score(model, part.prompt_ids, comps, with_grad=True)
                width = lp.shape[1]
                ref, given = part.ref_logprobs, part.old_logprobs
                old = lp.detach() if given is None else padded_values(given, width, device)
                loss, stats = loss_fn(
                    lp,
                    old,
                    None if ref is None else padded_values(ref, width, device),
                    torch.tensor(part.advantages, dtype=torch.float32, device=device),
                    mask,
                    ent if self.entropy else None,
                    normalizer=normalizer,
                )
                # Each rank's gradient is scaled by the rank count so that the data-parallel
                # gradient averaging (DDP, FSDP2) yields the sum over ranks. A micro-batch of
                # empty responses has no graph and adds nothing.
                if loss.requires_grad:
                    (loss * ranks).backward()
                loss_sum += float(loss.detach())
                share = (
                    sum(len(c) for c in comps) / max(local.tokens, 1)
                    if self.weighting == "tokens"
                    else len(comps) / len(batch)
                )
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + float(v) * (1.0 if k in ADDITIVE_STATS else share)
        finally:
            model.eval()
        clip = self.optim_cfg.grad_clip if self.optim_cfg.grad_clip > 0 else float("inf")
        total_norm = torch.nn.utils.clip_grad_norm_(list(self.params.values()), clip)
        if hasattr(total_norm, "full_tensor"):  # sharded parameters (FSDP2): the norm is a DTensor
            total_norm = total_norm.full_tensor()
        grad_norm = float(total_norm)
        skipped = not math.isfinite(grad_norm)
        if not skipped:
            self.optimizer.step()
        self.scheduler.step()
        # The step is whole: its gradients are freed now rather than at the next step's start, and
        # on CUDA the cached blocks go back, for an engine sharing the device (colocated vLLM).
        self.optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        else:  # the freed activations' pages back to the system (host_memory.py)
            release_free_heap()
        result = {**sums, "loss": loss_sum, "grad_norm": grad_norm, "lr": lr}
        result.update(tokens=float(local.tokens), seconds=time.perf_counter() - start, skipped=float(skipped))
        self.last_stats = result
        return result

    def named_weights(self) -> dict[str, torch.Tensor]:
        """The trainable tensors by name, detached, not copied (full weights or the adapter's LoRA).
        Sharded parameters are gathered whole on rank 0 (every rank must call this; the others get
        ``{}``)."""
        self.onload()
        return full_tensors(self.params)

    def save(self, path: Path) -> None:
        """Write trainable weights (safetensors) and optimizer + scheduler state under ``path``
        (sharded parameters: every rank calls this, see ``sharded_state.py``)."""
        self.onload()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        sharded = any(is_sharded(p) for p in self.params.values())
        tensors = {n: t.to("cpu").contiguous() for n, t in full_tensors(self.params).items()}
        if sharded:  # every rank writes its shards of the optimizer state
            save_sharded_optimizer(self, path)
        if rank() == 0:
            _atomic(path / WEIGHTS_FILE, lambda tmp: save_file(tensors, str(tmp)))
            if sharded:
                scheduler = self.scheduler.state_dict()
                _atomic(path / SCHEDULER_FILE, lambda tmp: torch.save(scheduler, tmp))
            else:
                state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
                _atomic(path / STATE_FILE, lambda tmp: torch.save(state, tmp))
        barrier()

    def load(self, path: Path) -> None:
        """Restore what :meth:`save` wrote; names and shapes must match this learner's parameters.
        The caller pushes the restored weights to the policy."""
        self.onload()
        path = Path(path)
        tensors = load_file(str(path / WEIGHTS_FILE))
        missing = sorted(set(self.params) - set(tensors))
        if missing:
            raise ValueError(
                f"{path / WEIGHTS_FILE} lacks {len(missing)} trainable tensors, e.g. {missing[0]}"
            )
        load_weights_into(self.params, tensors)
        if not (path / STATE_FILE).is_file() and (path / DCP_DIR).is_dir():  # saved by sharded ranks
            load_sharded_optimizer(self, path)
            return
        state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
        if any(is_sharded(p) for p in self.params.values()):
            load_full_optimizer(self, state)
            return
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    """Move every per-parameter state tensor of ``optimizer`` to ``device`` except AdamW's ``step``
    counter (a CPU scalar unless the optimizer is capturable or fused); returns how many moved."""
    moved = 0
    for state in optimizer.state.values():
        for key, value in state.items():
            if key != "step" and isinstance(value, torch.Tensor) and value.device != device:
                state[key] = value.to(device)
                moved += 1
    return moved


def _lengths(batch: TrainBatch) -> list[int]:
    """Tokens of each sequence of ``batch``: prompt + completion."""
    return [len(p) + len(c) for p, c in zip(batch.prompt_ids, batch.completion_ids, strict=True)]


def _atomic(target: Path, write: Any) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        tmp.replace(target)
    finally:
        if tmp.exists():
            tmp.unlink()
