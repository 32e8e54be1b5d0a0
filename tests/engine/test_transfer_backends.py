"""Which weight-transfer backend each layout gets, and that the trainer side goes through vLLM's
factories: codea1's ``codea1_buckets`` engine for real (on a fake model), vLLM's ``ipc`` and ``nccl``
with fakes in place of what needs a GPU. No engine starts here and none of this runs vLLM's CUDA
paths: those have not run on a GPU yet (docs/cluster.md).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from codea1.config import load_config
from codea1.engine.vllm_local.available import vllm_import_error
from codea1.engine.vllm_local.weight_sync import BUCKETS_BACKEND, REGISTERING_EXTENSION, pack, select_backend

needs_vllm = pytest.mark.skipif(
    bool(vllm_import_error()), reason=f"vLLM is not usable: {vllm_import_error()}"
)


def test_cpu_gets_the_buckets_and_cuda_gets_vllms_own_backends() -> None:
    assert select_backend(cuda=False) == BUCKETS_BACKEND
    assert select_backend(cuda=False, placement="split") == BUCKETS_BACKEND
    assert select_backend(cuda=True) == "ipc"  # the local backend: learners and engine on one GPU
    assert select_backend(cuda=True, placement="split") == "nccl"
    assert select_backend(cuda=True, placement="colocate") == "ipc"
    # replicas beyond the learner ranks: IPC cannot reach those on GPUs of their own, and NCCL would
    # join learner rank 0 and replica 0 on one GPU (the configuration refuses the layout first)
    with pytest.raises(ValueError, match="one GPU"):
        select_backend(cuda=True, placement="colocate", learner_on_every_gpu=False)
    # adapters mode: the replicas merge into a base held on the host
    assert select_backend(cuda=True, placement="split", full_weights=False) == BUCKETS_BACKEND


def test_a_ray_replica_of_the_paper_presets_gets_nccl_when_split_and_ipc_when_colocated() -> None:
    from codea1.engine.ray_cluster.transfer import direct_backend, replica_backend

    split = load_config("paper-7b-ray", ["cluster.placement=split"])
    colocate = load_config(
        "paper-7b-ray",
        ["cluster.placement=colocate", "cluster.learner_workers=4", "cluster.rollout_replicas=4"],
    )
    assert replica_backend(split, cuda=True) == "nccl"
    assert replica_backend(colocate, cuda=True) == "ipc"
    assert replica_backend(split, cuda=False) == BUCKETS_BACKEND
    assert direct_backend({"nccl"}) == "nccl" and direct_backend({"ipc"}) == "ipc"
    assert direct_backend({BUCKETS_BACKEND}) == direct_backend({""}) == direct_backend(set()) == ""


def test_engine_args_name_the_backend_and_register_the_buckets_in_other_processes() -> None:
    from codea1.engine.memory import EngineBudget
    from codea1.engine.vllm_local.roles import engine_args

    cfg = load_config("tiny-cpu", [])
    shape = SimpleNamespace(num_hidden_layers=2, num_key_value_heads=1, hidden_size=8, num_attention_heads=1)
    cpu = engine_args(cfg, "m", torch.float32, in_process=True, model_config=shape)
    assert cpu["weight_transfer_config"] == {"backend": BUCKETS_BACKEND}
    assert "worker_extension_cls" not in cpu  # the worker is in this process, which registered it
    budget = EngineBudget("e", 1.0, 1.0, 1 << 20, 1024, 256, 8, 0.5)
    cuda = engine_args(cfg, "m", torch.bfloat16, in_process=False, budget=budget)
    assert cuda["weight_transfer_config"] == {"backend": "ipc"} and "worker_extension_cls" not in cuda
    other = engine_args(
        cfg, "m", torch.float32, in_process=False, budget=budget, transfer_backend=BUCKETS_BACKEND
    )
    assert other["weight_transfer_config"] == {"backend": BUCKETS_BACKEND}
    assert other["worker_extension_cls"] == REGISTERING_EXTENSION


class FakeModel:
    """Stands for vLLM's model: records what ``load_weights`` got."""

    def __init__(self) -> None:
        self.loaded: list[tuple[str, torch.Tensor]] = []

    def load_weights(self, weights) -> set[str]:
        self.loaded.extend((n, t.clone()) for n, t in weights)
        return {n for n, _ in self.loaded}


@needs_vllm
def test_vllms_factory_builds_the_bucket_engine_and_it_loads_chunks_on_a_cpu() -> None:
    from vllm.config.weight_transfer import WeightTransferConfig
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    from codea1.engine.vllm_local.bucket_engine import BucketWeightTransferEngine

    model = FakeModel()
    fake_config = SimpleNamespace(parallel_config=None, model_config=None)
    engine = WeightTransferEngineFactory.create_engine(
        WeightTransferConfig(backend=BUCKETS_BACKEND), fake_config, torch.device("cpu"), model
    )
    assert isinstance(engine, BucketWeightTransferEngine)
    engine.init_transfer_engine(engine.parse_init_info({}))
    a, b = torch.randn(3, 4), torch.arange(5)
    engine.update_weights({"tensors": [("a", a)]})  # in-process: the tensor itself
    meta, blob = pack([("a", a), ("b", b)], torch.bfloat16)
    engine.update_weights({"meta": meta, "blob": bytes(blob)})  # across processes: a packed bucket
    assert [n for n, _ in model.loaded] == ["a", "a", "b"]
    assert torch.equal(model.loaded[0][1], a)
    assert torch.equal(model.loaded[1][1], a.to(torch.bfloat16)) and torch.equal(model.loaded[2][1], b)
    with pytest.raises(ValueError, match="either meta and blob or tensors"):
        engine.update_weights({})


class FakeClient:
    """Stands for vLLM's ``VLLMWeightSyncClient``: records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def init_weight_transfer_engine(self, init_info) -> None:
        self.calls.append(("init", init_info))

    def start_weight_update(self) -> None:
        self.calls.append(("start", None))

    def update_weights(self, update_info) -> None:
        self.calls.append(("update", update_info))

    def finish_weight_update(self, weight_version=None) -> None:
        self.calls.append(("finish", None))


class FakeIPCTrainer:
    """Stands for vLLM's ``IPCTrainerWeightTransferEngine`` (CUDA IPC needs a GPU): keeps its init
    info and reads the source as the real one does, one round per ``send_weights``."""

    built: list[object] = []

    def __init__(self, init_info, client, source) -> None:
        self.init_info, self.client, self.source, self.rounds = init_info, client, source, []

    @classmethod
    def trainer_init(cls, init_info, *, client, source=None):
        engine = cls(init_info, client, source)
        cls.built.append(engine)
        client.init_weight_transfer_engine({"packed": init_info.packed})
        return engine

    def send_weights(self) -> None:
        self.client.start_weight_update()
        self.rounds.append((self.source.metadata(), list(self.source)))
        self.client.finish_weight_update()

    def shutdown(self) -> None: ...


@needs_vllm
def test_an_ipc_sync_goes_through_vllms_trainer_factory_with_packed_buffers(monkeypatch) -> None:
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
    from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

    from codea1.engine.vllm_local.transfer import Sender, trainer_init_info

    FakeIPCTrainer.built = []
    monkeypatch.setitem(WeightTransferTrainerFactory._registry, "ipc", lambda: FakeIPCTrainer)
    client = FakeClient()
    info = trainer_init_info("ipc", bucket_bytes=1 << 20)
    assert isinstance(info, IPCTrainerInitInfo) and info.packed and info.packed_buffer_size_bytes == 1 << 20
    sender = Sender(client, info, device=torch.device("cpu"))  # the GPU in real life
    weights = {"w": torch.randn(4, 4), "step": torch.tensor([3])}
    for _ in range(2):
        assert sender.send(weights, torch.bfloat16) == (4 * 4 * 2 + 8, 0)
    (engine,) = FakeIPCTrainer.built  # one handshake
    assert [c for c, _ in client.calls] == ["init", "start", "finish", "start", "finish"]
    meta, pairs = engine.rounds[-1]
    assert [(m.name, m.dtype, m.shape) for m in meta] == [
        ("w", torch.bfloat16, (4, 4)),
        ("step", torch.int64, (1,)),
    ]
    assert torch.equal(pairs[0][1], weights["w"].to(torch.bfloat16)) and torch.equal(
        pairs[1][1], weights["step"]
    )


@needs_vllm
def test_vllms_nccl_handshake_gives_each_replica_its_own_rank(monkeypatch) -> None:
    """vLLM's real ``NCCLTrainerWeightTransferEngine.trainer_init`` up to the communicator, which a
    fake stands for; the client spreads the replicas over ranks 1..N of one group."""
    import vllm.distributed.weight_transfer.nccl_engine as nccl_engine
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    from codea1.engine.ray_cluster.transfer import ReplicaWeightSyncClient
    from codea1.engine.vllm_local.transfer import TensorSource, trainer_init_info

    opened = []
    monkeypatch.setattr(nccl_engine, "open_trainer_endpoint", lambda info: opened.append(info) or "group")

    class RecordingReplicas(ReplicaWeightSyncClient):
        def init_weight_transfer_engine(self, init_info) -> None:
            self.payloads = self.init_payloads(init_info)

    client = RecordingReplicas(["r0", "r1", "r2"])
    info = trainer_init_info("nccl", master_address="10.0.0.1", master_port=29600, world_size=4)
    engine = WeightTransferTrainerFactory.trainer_init(info, client=client, source=TensorSource())
    assert (
        isinstance(engine, nccl_engine.NCCLTrainerWeightTransferEngine)
        and engine.model_update_group == "group"
    )
    assert [p["rank_offset"] for p in client.payloads] == [1, 2, 3]
    assert {p["world_size"] for p in client.payloads} == {4} and all(p["packed"] for p in client.payloads)
    assert opened == [info]
    # a non-sender rank opens nothing and calls no replica
    quiet = RecordingReplicas(["r0"])
    info1 = trainer_init_info("nccl", rank=1, master_address="10.0.0.1", master_port=29600, world_size=2)
    assert not WeightTransferTrainerFactory.trainer_init(info1, client=quiet, source=TensorSource()).is_sender
    assert not hasattr(quiet, "payloads") and len(opened) == 1
    assert ReplicaWeightSyncClient(["a", "b"]).init_payloads({"packed": True}) == [{"packed": True}] * 2


def test_a_direct_push_is_driven_by_the_learners_and_logged_as_a_sync() -> None:
    from codea1.engine.ray_cluster.rollout_group import RayPolicy, ReplicaGroup
    from codea1.engine.ray_cluster.transfer import DirectWeights

    group = object.__new__(ReplicaGroup)  # no Ray: only what a push reads
    group.replicas, group.asleep, group.before_wake, group.what = ["r0", "r1"], False, [], "replicas"
    group.tokenizer = None
    pushes = []
    weights = DirectWeights(lambda: pushes.append(1) or {"bytes": 64.0, "tensors": 2.0}, dict)
    policy = RayPolicy(group, "coder", "vllm")
    policy.load_weights(weights)
    assert pushes == [1]
    assert policy.last_sync["bytes"] == 64.0 and policy.last_sync["replicas"] == 2.0
    assert policy.last_stats == {"sync_seconds": policy.last_sync["seconds"], "sync_bytes": 64.0}
    assert len(DirectWeights(lambda: {}, lambda: {"w": torch.zeros(1)})) == 1  # read: the object store
