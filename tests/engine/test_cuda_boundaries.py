"""The CUDA paths of the weight sync and the transformers rollout, proved on the CPU at the libraries'
boundaries: what codea1 hands vLLM and torch there, for the paper's real model shapes.

No GPU and no weights: each paper model is built on the meta device from its ``config.json`` facts
(tests/fixtures/paper_models), and vLLM's own IPC trainer engine and packed producer run on it, with
fakes only for what needs a GPU (the CUDA buffer, torch's CUDA-IPC export, the device's UUID). Its
update then goes through vLLM's own ``MsgpackEncoder`` / ``MsgpackDecoder`` in the environment
codea1's ``start_engine`` sets up, as the RPC to a CUDA engine core carries it.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import torch

from codea1.config import load_config
from codea1.engine.vllm_local.available import vllm_import_error

needs_vllm = pytest.mark.skipif(
    bool(vllm_import_error()), reason=f"vLLM is not usable: {vllm_import_error()}"
)
PAPER_MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "paper_models"
PAPER_PRESETS = ["paper-1.5b", "paper-1.5b-ray", "paper-3b", "paper-3b-ray", "paper-7b", "paper-7b-ray"]
GPU_UUID = "GPU-00000000-1111-2222-3333-444444444444"


def meta_model(spec: str) -> Any:
    """The model a preset names (``Qwen/Qwen2.5-Coder-1.5B-Instruct``), built on the meta device
    from its shipped config: its real tensor names and shapes, no memory."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(PAPER_MODELS / spec.split("/")[-1])
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def trained_weights(model: Any) -> dict[str, torch.Tensor]:
    """What a learner of ``separate`` mode sends: its trainable parameters (fp32 masters on CUDA),
    tied tensors once (``FullWeights.trainable``)."""
    from codea1.engine.hf_local.weights import FullWeights

    return dict(FullWeights(model, keep_reference=False).trainable())


def cuda_ipc_args(tensor: torch.Tensor) -> tuple[Any, tuple[Any, ...]]:
    """A stand-in for torch's ``reduce_tensor`` of a CUDA tensor: the same fields in the same types
    as its CUDA branch gives ``rebuild_cuda_tensor`` (torch/multiprocessing/reductions.py: the
    tensor's class, size, stride and offset, the storage class, the dtype, the device index, the
    allocation's IPC handle, the storage's size and offset, ``requires_grad``, the refcount file
    and offset, the event handle and whether to sync on it), for a tensor that is not on a GPU."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    args = (
        type(tensor), tensor.size(), tensor.stride(), tensor.storage_offset(), torch.storage.TypedStorage,
        tensor.dtype, 0, b"\x07" * 64, tensor.untyped_storage().nbytes(), 0, tensor.requires_grad,
        b"/torch_12345_678_0", 0, b"\x09" * 64, True,
    )  # fmt: skip
    assert len(args) == len(inspect.signature(rebuild_cuda_tensor).parameters)
    return rebuild_cuda_tensor, args


class TorchWithCudaOnMeta:
    """``torch`` as vLLM's packed producer sees it here: its CUDA staging buffer on the meta device
    (the real size, no memory), its stream synchronisation a no-op; everything else is torch."""

    cuda = SimpleNamespace(current_stream=lambda: SimpleNamespace(synchronize=lambda: None))

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def empty(*size: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.empty(*size, device="meta" if str(device).startswith("cuda") else device, **kwargs)


class RecordingLLM:
    """vLLM's ``LLM`` weight-transfer calls (its ``RLOfflineMixin`` methods, unwrapped as they do)
    recording the ``collective_rpc`` each makes to the engine core."""

    def __init__(self) -> None:
        self.rpcs: list[tuple[str, dict[str, Any] | None]] = []
        self.llm_engine = SimpleNamespace(collective_rpc=self._rpc)

    def _rpc(
        self, method: str, timeout: float | None = None, args: tuple = (), kwargs: dict | None = None
    ) -> None:
        self.rpcs.append((method, kwargs))

    def __getattr__(self, name: str) -> Any:
        from vllm.entrypoints.rl.offline import RLOfflineMixin

        return getattr(RLOfflineMixin, name).__get__(self)


@pytest.fixture
def cuda_ipc_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """What vLLM's IPC trainer engine needs from a GPU, stood in for (see the module docstring)."""
    import vllm.distributed.weight_transfer.packed_tensor as packed

    monkeypatch.setattr(packed, "torch", TorchWithCudaOnMeta())
    monkeypatch.setattr(packed, "reduce_tensor", cuda_ipc_args)
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(uuid=GPU_UUID))
    monkeypatch.setattr(torch.cuda, "ipc_collect", lambda: None)


def ipc_sync(weights: dict[str, torch.Tensor]) -> tuple[RecordingLLM, Any]:
    """One sync of ``weights`` (bf16 on the wire) through codea1's ``Sender`` into vLLM's real IPC
    trainer engine, built as ``VLLMRollout`` builds it; returns the engine's RPCs and the sender."""
    from codea1.engine.vllm_local.transfer import LLMClient, Sender, trainer_init_info

    llm = RecordingLLM()
    sender = Sender(LLMClient(llm), trainer_init_info("ipc"))
    sender.send(weights, torch.bfloat16)
    return llm, sender


@needs_vllm
@pytest.mark.parametrize("preset", PAPER_PRESETS)
def test_the_ipc_staging_buffer_holds_every_tensor_of_every_paper_model(
    preset: str, cuda_ipc_stand_ins
) -> None:
    """vLLM's packed IPC producer raises for a tensor larger than its buffer; every paper model's
    bf16 embedding is larger than 256 MiB (467 MB at 1.5B, 622 MB at 3B, 1.09 GB at 7B)."""
    cfg = load_config(preset)
    for spec in {cfg.engine.coder_model, cfg.engine.role_model("tester")}:
        weights = trained_weights(meta_model(spec))
        largest = max(t.numel() * 2 for t in weights.values())
        assert largest > 256 << 20  # the embedding, in bf16
        llm, sender = ipc_sync(weights)  # vLLM's ValueError here before the buffer was sized
        assert sender.init_info.packed_buffer_size_bytes >= largest
        updates = [kw["update_info"] for method, kw in llm.rpcs if method == "update_weights"]
        assert [m for m, _ in llm.rpcs] == ["init_weight_transfer_engine", "start_weight_update"] + [
            "update_weights"
        ] * len(updates) + ["finish_weight_update"]
        assert [n for u in updates for n in u["names"]] == list(weights)
        assert max(s for u in updates for s in u["tensor_sizes"]) == largest
        assert all(sum(u["tensor_sizes"]) <= sender.init_info.packed_buffer_size_bytes for u in updates)


@needs_vllm
def test_the_ipc_update_of_a_paper_model_crosses_vllms_msgpack_rpc_in_codea1s_environment(
    cuda_ipc_stand_ins, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA the engine core is another process: ``LLM.update_weights`` reaches it through vLLM's
    msgpack encoder, which refuses the CUDA-IPC handle's classes and ``torch.dtype`` unless
    ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` was set before the engine started. codea1's
    ``start_engine`` of a CUDA engine with the ``ipc`` backend (vLLM itself stood in for) sets the
    environment; the exact update of paper-1.5b's first chunk then round-trips unchanged."""
    import vllm
    import vllm.envs as envs
    from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferUpdateInfo
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    from codea1.engine.memory import EngineBudget
    from codea1.engine.vllm_local.roles import start_engine

    cfg = load_config("paper-1.5b")
    llm, _ = ipc_sync(trained_weights(meta_model(cfg.engine.coder_model)))
    method, kwargs = next((m, kw) for m, kw in llm.rpcs if m == "update_weights")
    started: list[dict[str, str]] = []

    class StartedLLM:  # vllm.LLM: records the environment the engine (and its core) starts in
        def __init__(self, **args: Any) -> None:
            started.append(dict(os.environ))

    monkeypatch.setattr(vllm, "LLM", StartedLLM)
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path))  # no private socket directory made
    budget = EngineBudget("coder", 3.0, 1.0, 1 << 30, 8192, 64, 2, 0.3)
    with mock.patch.dict(os.environ):
        os.environ.pop("VLLM_ALLOW_INSECURE_SERIALIZATION", None)
        start_engine(cfg, "Qwen/Qwen2.5-Coder-1.5B-Instruct", torch.bfloat16, False, budget=budget,
                     transfer_backend="ipc")  # fmt: skip
    (environment,) = started
    if envs._is_envs_cache_enabled():  # an in-process engine of an earlier test cached vLLM's
        envs.disable_envs_cache()
    with mock.patch.dict(os.environ, environment, clear=True):
        frames = MsgpackEncoder().encode((0, 7, "collective_rpc", (method, None, (), kwargs)))
        _, _, utility, (rpc, _, _, decoded) = MsgpackDecoder().decode(frames)
    assert (utility, rpc) == ("collective_rpc", "update_weights")
    info = IPCWeightTransferUpdateInfo(**decoded["update_info"])  # what vLLM's IPC worker parses
    sent = kwargs["update_info"]
    assert info.names == sent["names"] and info.tensor_sizes == sent["tensor_sizes"]
    assert info.dtype_names == ["bfloat16"] * len(info.names)
    assert list(info.ipc_handles) == [GPU_UUID]
    # classes, dtype and handles come back as they went (msgpack gives sizes back as lists, which
    # rebuild_cuda_tensor takes as it takes torch.Size)
    got, want = info.ipc_handles[GPU_UUID], sent["ipc_handles"][GPU_UUID]
    assert [list(a) if isinstance(a, tuple) else a for a in want] == got
    assert [type(a) for a in got if not isinstance(a, list)] == [
        type(a) for a in want if not isinstance(a, tuple)
    ]
    # the switch is the engine's own (an ipc engine only): a CPU engine's environment stays as it was
    with mock.patch.dict(os.environ):
        os.environ.pop("VLLM_ALLOW_INSECURE_SERIALIZATION", None)
        monkeypatch.setattr(vllm, "LLM", lambda **args: started.append(dict(os.environ)))
        start_engine(cfg, str(PAPER_MODELS / "Qwen2.5-Coder-1.5B-Instruct"), torch.float32, True)
        assert "VLLM_ALLOW_INSECURE_SERIALIZATION" not in started[-1]


@needs_vllm
def test_a_later_round_with_a_larger_tensor_reopens_the_ipc_engine_with_a_buffer_that_holds_it(
    cuda_ipc_stand_ins,
) -> None:
    """The first round sized the buffer; a round with a larger tensor (another role's weights through
    one sender) gets a new trainer engine with a larger buffer instead of vLLM's ValueError."""
    from codea1.engine.vllm_local.transfer import LLMClient, Sender, trainer_init_info

    llm = RecordingLLM()
    sender = Sender(LLMClient(llm), trainer_init_info("ipc", bucket_bytes=1 << 10))
    sender.send({"a": torch.empty(16, 16, device="meta")}, torch.bfloat16)
    first = sender.engine
    assert sender.init_info.packed_buffer_size_bytes == 1 << 10 and first is not None
    sender.send({"b": torch.empty(64, 64, device="meta")}, torch.bfloat16)
    assert sender.init_info.packed_buffer_size_bytes == 64 * 64 * 2 and sender.engine is not first
    assert dataclasses.replace(sender.init_info, packed_buffer_size_bytes=1 << 10) == trainer_init_info(
        "ipc", bucket_bytes=1 << 10
    )
    assert [m for m, _ in llm.rpcs].count("init_weight_transfer_engine") == 2


class TokenIds:
    """A stand-in tokenizer: text is token ids written as decimal numbers separated by spaces."""

    pad_token_id, eos_token_id = 0, 1

    def __call__(self, text: str, add_special_tokens: bool = False) -> Any:
        return SimpleNamespace(input_ids=[int(t) for t in text.split()])

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(str(i) for i in ids)


def tiny_qwen2(dtype: torch.dtype) -> Any:
    """A random-init Qwen2 (the paper models' architecture, biases on q/k/v) of 2 small layers."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True, eos_token_id=1,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Qwen2ForCausalLM(config).to(dtype)


def test_transformers_rollouts_on_cuda_sample_in_bf16_from_the_fp32_master_weights(monkeypatch) -> None:
    """``engine.device: cuda`` (bf16): the local learner keeps fp32 master weights of the module its
    policy samples from; the rollout computes and keeps its KV cache in bf16 all the same. The device
    is stood in for (CUDA "available", the model loaded on the CPU); the roles, the learner's master
    weights and the policy's ``generate`` are the real ones."""
    from codea1.config import EngineConfig, LossConfig, OptimConfig
    from codea1.engine.base import SamplingParams
    from codea1.engine.hf_local import roles as hf_roles

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    loads: list[tuple[str, str]] = []

    def load(spec: str, dtype: str, device: str, cache_dir: str) -> tuple[Any, Any]:
        loads.append((dtype, device))
        return tiny_qwen2(torch.bfloat16), TokenIds()  # what a bf16 load on the GPU gives

    monkeypatch.setattr(hf_roles, "load_model_and_tokenizer", load)
    built = hf_roles.build_roles(
        EngineConfig(device="cuda"), OptimConfig(), OptimConfig(), 1,
        temperature_coder=1.0, temperature_tester=1.0, loss=LossConfig(kl_coef=0.0),
    )  # fmt: skip
    assert loads == [("auto", "cuda")]
    for learner, policy in (
        (built.coder_learner, built.coder_policy),
        (built.tester_learner, built.tester_policy),
    ):
        assert {p.dtype for p in learner.params.values()} == {torch.float32}  # the masters
        trained = policy.rollout.model
        seen: list[tuple[str, torch.dtype]] = []

        def keys(module: Any, args: Any, kwargs: dict[str, Any], out: Any, seen: list = seen) -> None:
            seen.append(("kv", kwargs["past_key_values"].layers[0].keys.dtype))

        trained.model.layers[0].self_attn.register_forward_hook(keys, with_kwargs=True)
        trained.lm_head.register_forward_hook(lambda m, a, out, seen=seen: seen.append(("logits", out.dtype)))
        params = SamplingParams(n=2, max_new_tokens=3, seed=5)
        completions = policy.generate(["5 6 7", "8 9"], params)
        assert len(completions) == 4 and seen
        assert set(seen) == {("kv", torch.bfloat16), ("logits", torch.bfloat16)}
        assert {p.dtype for p in trained.parameters()} == {torch.float32}  # the masters untouched
