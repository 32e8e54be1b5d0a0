"""A vLLM rollout replica starts without loading the model's weights itself: its eos ids come from
the generation config, the same as a loaded model's, and the engine gets the model's location."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from codea1.config import load_config
from codea1.engine.hf_local.policy import eos_ids
from codea1.engine.loading import load_model_and_tokenizer, load_tokenizer
from codea1.engine.ray_cluster import rollout_replica
from codea1.engine.vllm_local import roles as vroles
from tests.tiny_model import make_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def loaded_eos_ids(location: Path) -> list[int]:
    model, tokenizer = load_model_and_tokenizer(str(location), "float32", "cpu")
    return sorted(eos_ids(model, tokenizer))


def test_eos_ids_from_the_generation_config_are_the_loaded_models(tiny: Path, tmp_path: Path) -> None:
    tokenizer = load_tokenizer(str(tiny))
    assert rollout_replica.config_eos_ids(str(tiny), tokenizer) == loaded_eos_ids(tiny)
    two = Path(shutil.copytree(tiny, tmp_path / "two"))
    config = json.loads((two / "generation_config.json").read_text())
    (two / "generation_config.json").write_text(
        json.dumps({**config, "eos_token_id": [tokenizer.eos_token_id, 7]})
    )
    assert 7 in rollout_replica.config_eos_ids(str(two), tokenizer) == loaded_eos_ids(two)
    bare = Path(shutil.copytree(tiny, tmp_path / "bare"))
    (bare / "generation_config.json").unlink()
    assert rollout_replica.config_eos_ids(str(bare), tokenizer) == loaded_eos_ids(bare)


def test_a_vllm_replica_loads_no_weights(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_weights(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a vLLM replica in separate mode loads no weights")

    started: list[tuple[str, bool, Any]] = []

    def start(cfg: Any, location: str, dtype: Any, in_process: bool, **kw: Any) -> str:
        started.append((location, in_process, kw["budget"]))
        return "llm"

    monkeypatch.setattr(rollout_replica, "load_model_and_tokenizer", no_weights)
    monkeypatch.setattr(vroles, "start_engine", start)
    replica = rollout_replica.RolloutReplica(load_config("tiny-cpu"), str(tiny), ["coder", "tester"], "vllm")
    assert started == [(str(tiny), True, None)]  # on CPU: in-process, no GPU budget
    assert replica.rollout.llm == "llm" and not replica.started()
    expected = frozenset(rollout_replica.config_eos_ids(str(tiny), load_tokenizer(str(tiny))))
    assert replica.policies["tester"].eos_ids == expected
