"""The vLLM evaluation engine (``codea1 eval --engine vllm``) on SmolLM2-135M, fp32, in-process on CPU.

A training checkpoint's weights must reach the engine (it starts from the base model's files), and a
prompt the engine's context cannot hold is refused before anything is sampled. Skipped when vLLM does
not import here or the demo model is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from codea1.config import EngineConfig, config_from_dict, dump_config
from codea1.engine.base import PromptTooLong, SamplingParams
from codea1.engine.vllm_local.available import vllm_import_error
from tests.demo_model import require_demo_model

require_demo_model()
if vllm_import_error():
    pytest.skip(f"vLLM is not usable here: {vllm_import_error()}", allow_module_level=True)
pytestmark = pytest.mark.slow

ENGINE = EngineConfig(coder_model="smollm2-135m", dtype="float32", device="cpu")
GREEDY = SamplingParams(n=1, temperature=1.0, top_k=1, max_new_tokens=12, seed=0)  # top-1: greedy
QUESTIONS = ["Write a Python function add(a, b).", "Name a colour.", "What is 2 + 3?"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ``separate``-mode role directory whose attention outputs are halved in every layer: a
    "trained" model whose greedy answers differ from the base's."""
    from codea1.engine.loading import load_model_and_tokenizer

    base, _ = load_model_and_tokenizer("smollm2-135m", "float32", "cpu")
    trained = {n: (p.detach() * 0.5).contiguous() for n, p in base.named_parameters() if "o_proj" in n}
    step = tmp_path_factory.mktemp("run") / "checkpoints" / "step_000001"
    (step / "tester").mkdir(parents=True)
    dump_config(
        config_from_dict({"engine": {"coder_model": "smollm2-135m", "mode": "separate"}}),
        step / "config.yaml",
    )
    save_file(trained, str(step / "tester" / "weights.safetensors"))
    return str(step / "tester")


def _policy(spec: str, sampler: str):
    from codea1.engine.build import inference_policy

    return inference_policy(spec, ENGINE, sampler=sampler, max_new_tokens=GREEDY.max_new_tokens, batch_size=4)


def _greedy(policy) -> list[tuple[int, ...]]:
    prompts = [policy.render([{"role": "user", "content": q}]) for q in QUESTIONS]
    return [c.completion_ids for c in policy.generate(prompts, GREEDY)]


def test_a_checkpoints_weights_reach_the_engine(checkpoint: str) -> None:
    vllm_trained = _policy(checkpoint, "vllm")
    assert vllm_trained.name == "vllm"
    trained = _greedy(vllm_trained)
    assert trained == _greedy(_policy(checkpoint, "transformers"))  # the trained model, either engine
    assert trained != _greedy(_policy("smollm2-135m", "vllm"))  # not the base it started from


def test_a_prompt_longer_than_the_context_is_refused_before_sampling() -> None:
    policy = _policy("smollm2-135m", "vllm")
    fits = policy.render([{"role": "user", "content": "Say hi."}])
    long = policy.render([{"role": "user", "content": "word " * (policy.context + 10)}])
    with pytest.raises(PromptTooLong, match=r"prompt 1 has \d+ tokens; the vLLM evaluation engine holds"):
        policy.generate([fits, long], GREEDY)
    assert policy.last_stats == {}  # nothing was sampled
    assert len(policy.generate([fits], GREEDY)) == 1


def test_torch_threads_are_left_as_they_were() -> None:
    before = torch.get_num_threads()
    _policy("smollm2-135m", "vllm")
    assert torch.get_num_threads() == before


def test_eval_tests_samples_with_vllm_into_its_own_results_file(tmp_path: Path) -> None:
    import json

    from codea1.cli import main

    common = ["eval", "tests", "--data", "demo:easy", "--limit", "1", "--model", "smollm2-135m", "--k", "2"]
    common += ["--max-new-tokens", "32", "--dtype", "float32", "--results-dir", str(tmp_path / "results")]
    common += ["--cache-dir", str(tmp_path / "cache"), "--workers", "1"]
    files = {}
    for engine in ("vllm", "transformers"):
        out = tmp_path / f"{engine}.json"
        assert main([*common, "--engine", engine, "--output", str(out)]) == 0
        files[engine] = json.loads(out.read_text())["results"]
    assert files["vllm"] != files["transformers"]  # two engines' suites never share a results file
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == sorted(
        Path(f).name for f in files.values()
    )
