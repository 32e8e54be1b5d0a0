"""A Ray learner group's start-up holds one copy of the model in host memory, not one per rank.

Two gloo ranks in processes of their own (no Ray) run ``LearnerWorker.setup`` on a random-init
Llama of about 390 MB in fp32 with its frozen reference (fp32 on a CPU). Each rank's host-memory
peak during setup is read from the kernel (``VmHWM``, reset through ``/proc/self/clear_refs`` after
the imports and the tokenizer, which any start-up pays), less what its own shards hold (on a CPU
the shards are in host memory; on CUDA they are on the GPU). Beyond its shards, rank 1 must hold
less than half a model: one whole tensor at a time while rank 0 broadcasts (the embedding, a
quarter of this model); rank 0 less than one and a half: the one whole copy it reads. Before
``sharded_load`` every rank read the whole model and copied the reference from it: two whole
models beyond its shards, on every rank. The shards must also hold the checkpoint's values
exactly: the gathered weights and reference equal the files', and the rotary frequencies (buffers,
outside any state dict) are rank 0's.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from tests.demo_model import require_demo_model

pytestmark = pytest.mark.slow  # two processes start torch.distributed and build a 390 MB model

LAYERS, HIDDEN, INTERMEDIATE = 24, 512, 1536


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_dir(directory: Path) -> tuple[Path, int]:
    """A random-init Llama with SmolLM2's tokenizer, mostly decoder layers (the embedding, the
    largest tensor a rank receives whole, is a quarter of it); the directory and its fp32 bytes."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from codea1.engine.loading import SMOLLM2_SPEC, default_cache_dir, dequantize_gguf_to_cache, resolve_model

    smollm2 = dequantize_gguf_to_cache(Path(resolve_model(SMOLLM2_SPEC).location), default_cache_dir())
    tok = AutoTokenizer.from_pretrained(str(smollm2))
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory, 4 * sum(p.numel() for p in model.parameters())


def _peak_reset() -> bool:
    """Reset this process's peak resident set (Linux ``clear_refs`` 5); False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def _warm_up(model: str) -> None:
    """What every start-up pays before the weights: the imports, the tokenizer, the model's classes."""
    import torch.distributed.checkpoint.state_dict  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    AutoTokenizer.from_pretrained(model)
    with torch.device("meta"):
        AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))


def _rank(rank: int, port: int, model: str, out: dict) -> None:
    from codea1.config import RunConfig, with_values
    from codea1.engine.hf_local.sharded_state import full_tensors
    from codea1.engine.ray_cluster.learner_worker import LearnerWorker

    cfg = with_values(
        RunConfig(),
        {"engine.coder_model": model, "engine.device": "cpu", "engine.dtype": "float32",
         "engine.rollout": "transformers", "loss.kl_coef": 0.001, "cluster.learner_workers": 2},
    )  # fmt: skip
    torch.set_num_threads(1)
    _warm_up(model)
    worker = LearnerWorker(cfg, "coder", rank, 2, shared=False)
    out[(rank, "reset")] = _peak_reset()
    base = _status_kib("VmRSS")
    worker.setup(("127.0.0.1", port), cfg.coder.optim, 1)
    growth = (_status_kib("VmHWM") - base) * 1024
    try:
        learner = worker._learner()
        with learner.weights.reference_model() as ref:
            tensors = [*learner.params.values(), *ref.parameters()]
        shards = sum(t.to_local().numel() * t.element_size() for t in tensors)
        out[(rank, "beyond shards")] = growth - shards
        weights = full_tensors(learner.params, None)
        with learner.weights.reference_model() as ref:
            reference = full_tensors(dict(ref.named_parameters()), None)
            buffers = {n: b.clone() for n, b in ref.named_buffers()}
        buffers |= {f"model:{n}": b.clone() for n, b in learner.weights.model.named_buffers()}
        if rank == 0:
            out["weights"] = {n: t.clone() for n, t in weights.items()}
            out["reference"] = {n: t.clone() for n, t in reference.items()}
        out[(rank, "buffers")] = buffers
    finally:
        worker.close()


def test_rank_1_holds_under_one_whole_model_at_start_and_gets_the_files_values(tmp_path: Path) -> None:
    require_demo_model()
    from transformers import AutoModelForCausalLM

    directory, model_bytes = _model_dir(tmp_path / "model")
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(_free_port(), str(directory), out), nprocs=2)
        out = dict(out)
    if not out[(1, "reset")]:
        pytest.skip("this kernel cannot reset a process's peak resident set (/proc/self/clear_refs)")
    extra = {r: out[(r, "beyond shards")] / model_bytes for r in (0, 1)}
    # rank 1: one whole tensor in flight beyond its shards; rank 0: the one copy it reads (the old
    # code: two whole models, the loaded one and the reference copied from it, on every rank)
    assert extra[1] < 0.5, f"rank 1 held {extra[1]:.2f} whole fp32 models beyond its shards at start"
    assert extra[0] < 1.5, f"rank 0 held {extra[0]:.2f} whole fp32 models beyond its shards at start"
    want = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    files = {n: p.detach() for n, p in want.named_parameters()}
    assert sorted(out["weights"]) == sorted(files)
    assert all(torch.equal(out["weights"][n], files[n]) for n in files)
    assert sorted(out["reference"]) == sorted(files)
    assert all(torch.equal(out["reference"][n], files[n]) for n in files)
    rotary = dict(want.named_buffers())
    for rank in (0, 1):
        got = out[(rank, "buffers")]
        for prefix in ("", "model:"):
            assert all(torch.equal(got[prefix + n], rotary[n]) for n in rotary), (rank, prefix)
