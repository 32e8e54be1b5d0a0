"""One rank of a role's learner group: a Ray actor holding an FSDP2 shard of the role's model.

The driver creates ``cluster.learner_workers`` of these per trained role, asks rank 0 for an
address, then starts ``torch.distributed`` on all of them (gloo on CPU, NCCL on CUDA). Each rank
builds the role's model and frozen reference from the same files and seed for LoRA initialisation
as the local backend, without holding them whole: the structure on the meta device, sharded with
FSDP2, its own shards allocated, their values broadcast from rank 0, the one rank that reads the
checkpoint into host memory (``hf_local.sharded_load``: one copy per group at start, not one per
rank). It wraps them in the same
:class:`~codea1.engine.hf_local.HFLearner`; the loss normaliser and the micro-batch count are
agreed over the group, so an update equals the one-process update on the whole batch. When the
run's dtype is bf16, the ranks keep fp32 master weights and AdamW state and compute in bf16 (FSDP2
mixed precision): pure bf16 weights would round most updates at the paper's lr of 1e-6 away.

On CUDA the frozen reference is sharded with FSDP2's ``CPUOffloadPolicy`` (the reference's
``ref.fsdp_config.param_offload``): its shards live in host memory and each layer is copied in for
its all-gather. Colocated with replicas, a rank moves its weights and AdamW state to host memory
when asked (``offload``) and takes them back before it next computes (``HFLearner.onload``).

A weight sync (``named_weights``) gathers full weights tensor by tensor in the rollout dtype (the
compute dtype, which the replicas sample in: bf16 on GPU), onto rank 0's CPU only; LoRA tensors
travel in their own dtype (the replicas merge them into the base). Checkpoints keep the fp32 masters.

A rank of a group connected to its replicas by vLLM's ``nccl`` / ``ipc`` (``open_transfer``, CUDA
only, not yet run on a GPU) sends through vLLM's trainer engine instead (``push_weights``).

Imports: torch, config, engine.base, engine.hf_local, engine.loading; vllm and engine.vllm_local.transfer
lazily (``open_transfer``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path
from typing import Any

import torch

from codea1.config import RunConfig
from codea1.engine.base import LossFn, TrainBatch
from codea1.engine.hf_local import HFLearner
from codea1.engine.hf_local.fsdp import shard
from codea1.engine.hf_local.roles import set_host_heap, with_adapters
from codea1.engine.hf_local.sharded_load import empty_model, full_weights, materialize, receive_weights
from codea1.engine.hf_local.sharded_state import full_tensors
from codea1.engine.hf_local.weights import AdapterWeights, FullWeights
from codea1.engine.loading import pick_device, pick_dtype


class LearnerWorker:
    """The body of a learner rank (wrapped with ``ray.remote`` by the learner group)."""

    def __init__(self, cfg: RunConfig, role: str, rank: int, world: int, shared: bool) -> None:
        self.cfg, self.role, self.rank, self.world, self.shared = cfg, role, rank, world, shared
        self.learner: HFLearner | None = None
        self.rollout_dtype: torch.dtype | None = None
        self.sender: Any = None
        """vLLM's trainer side toward the replicas (``open_transfer``; ``nccl`` / ``ipc`` only)."""
        """What a sync sends full weights in (set by ``setup``; LoRA tensors keep their own)."""
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    def address(self) -> tuple[str, int]:
        """An address and a free port on this node, for the group's rendezvous (rank 0's)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(self, master: tuple[str, int], optim: Any, total_steps: int) -> int:
        """Join the group, build and shard the role's model, create its learner; returns the
        number of trainable tensors."""
        cuda = self.cfg.cluster.gpus_per_worker > 0 and torch.cuda.is_available()
        device = "cuda" if cuda else "cpu"
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master[0], str(master[1])
        torch.distributed.init_process_group(
            "nccl" if cuda else "gloo", rank=self.rank, world_size=self.world
        )
        if cuda:
            torch.cuda.set_device(0)
        compute = pick_dtype(self.cfg.engine.dtype, pick_device(device))
        mixed = compute != torch.float32  # fp32 master weights and AdamW state, compute in bf16
        self.rollout_dtype = compute if self.cfg.engine.mode == "separate" else None
        # this rank's engine settings: its device, and the weights loaded in fp32 (the masters)
        engine = dataclasses.replace(self.cfg.engine, device=device, dtype="float32")
        spec = engine.role_model(self.role)
        # the structure on the meta device; rank 0 alone reads the weights, into host memory (one copy
        # per group, not one per rank), and each rank receives its shards' part (sharded_load)
        set_host_heap(engine)
        model, tokenizer = empty_model(engine, spec)
        source = full_weights(engine, spec) if self.rank == 0 else None
        keep_reference = self.cfg.loss.keeps_reference
        where = torch.device(device, 0) if cuda else torch.device("cpu")
        if engine.mode == "separate":
            # the frozen reference is made straight in the compute dtype (no second fp32 copy)
            weights: Any = FullWeights(model, keep_reference, reference_dtype=compute if mixed else None)
            shard(weights.model, compute if mixed else None)
            materialize(weights.model, where)
            receive_weights(weights.model, source)
            if weights.reference is not None:  # in host memory on CUDA, a layer at a time on the GPU
                shard(weights.reference, offload=cuda)
                materialize(weights.reference, where, offload=cuda)
                receive_weights(weights.reference, source)
        else:
            names = ["coder"] if self.shared else ["coder", "tester"]
            seed = self.cfg.train.seed
            weights = AdapterWeights(with_adapters(model, engine, names, seed=seed), self.role)
            weights.train_model()  # settles which adapter is trainable before sharding
            shard(weights.peft_model, compute if mixed else None)
            materialize(weights.peft_model, where)
            if source is not None:  # the same adapters, drawn from the same seed
                source = with_adapters(source, engine, names, seed=seed)
            receive_weights(weights.peft_model, source)
        del source
        sampling = getattr(self.cfg, self.role).sampling
        self.learner = HFLearner.from_config(
            weights, optim, total_steps, engine, self.cfg.loss,
            temperature=sampling.temperature, pad_id=tokenizer.pad_token_id,
        )  # fmt: skip
        if cuda:  # the unsharded load's blocks, back to the GPU before a colocated replica starts
            torch.cuda.empty_cache()
        return len(self.learner.params)

    def _learner(self) -> HFLearner:
        if self.learner is None:
            raise RuntimeError("LearnerWorker.setup was not called")
        return self.learner

    def logprobs(self, batch: TrainBatch, reference: bool) -> list[tuple[float, ...]]:
        """Per-token log-probs of this rank's share of a batch."""
        return self._learner().logprobs(batch, reference=reference)

    def train_step(self, batch: TrainBatch, loss_fn: LossFn) -> dict[str, float]:
        """This rank's part of one optimizer step (gradients are reduced over the group)."""
        return self._learner().train_step(batch, loss_fn)

    def offload(self) -> bool:
        """Move this rank's weights and AdamW state to host memory while the replicas sharing its
        GPU sample; True when they moved (CUDA), False on a CPU."""
        learner = self._learner()
        learner.offload()
        return learner.home is not None

    def named_weights(self) -> dict[str, torch.Tensor] | None:
        """The whole trainable tensors on rank 0, on the CPU, full weights in the rollout dtype; None
        on the others, which take part in each gather and keep nothing (all ranks must call)."""
        weights = full_tensors(self._learner().params, self.rollout_dtype)
        if self.rank != 0:
            return None
        return {n: t.to("cpu") for n, t in weights.items()}

    def open_transfer(self, backend: str, replicas: list[Any], master: tuple[str, int], world: int) -> None:
        """Set up vLLM's trainer engine of ``backend`` (``nccl`` / ``ipc``) toward ``replicas`` (their
        actor handles), through vLLM's trainer factory; every rank calls, rank 0 is the sender and
        drives the replicas (NCCL: ``master`` is rank 0's address, ``world`` 1 + the replicas).
        Written against vLLM 0.32's source; **not yet run on a GPU** (``ray_cluster.transfer``)."""
        from codea1.engine.ray_cluster.transfer import ReplicaWeightSyncClient
        from codea1.engine.vllm_local.transfer import Sender, trainer_init_info

        nccl = {"master_address": master[0], "master_port": master[1], "world_size": world}
        info = trainer_init_info(backend, rank=self.rank, **(nccl if backend == "nccl" else {}))
        self.sender = Sender(ReplicaWeightSyncClient(replicas), info, device=torch.device("cuda", 0))
        self.sender.open()  # the handshake: NCCL's rendezvous with every replica

    def push_weights(self) -> dict[str, float]:
        """One update round of the whole trainable tensors in the rollout dtype through the engine
        of :meth:`open_transfer` (every rank; FSDP gathers are collectives); returns ``bytes`` and
        ``tensors`` sent (the same on every rank)."""
        learner = self._learner()
        learner.onload()  # CUDA IPC shares the weights from the GPU; NCCL broadcasts from there
        sent, _ = self.sender.send(learner.params, self.rollout_dtype)
        return {"bytes": float(sent), "tensors": float(len(learner.params))}

    def save(self, path: str) -> None:
        """Write this rank's part of the role's checkpoint directory (all ranks call)."""
        self._learner().save(Path(path))

    def load(self, path: str) -> None:
        """Restore a checkpoint written by any number of ranks, or by the local backend."""
        self._learner().load(Path(path))

    def close(self) -> None:
        """Leave the process group."""
        if self.sender is not None:
            self.sender.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
