"""Strict configuration loading: unknown keys, wrong types, overrides, invariants, presets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from codea1.config import (
    ConfigError,
    RunConfig,
    config_from_dict,
    load_config,
    preset_names,
    with_values,
)


def test_defaults_are_valid() -> None:
    cfg = RunConfig()
    assert cfg.reward.alpha == 0.5
    assert cfg.loss.clip_low == 0.2 and cfg.loss.clip_high == 0.28


def test_unknown_key_names_key_and_valid_ones() -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({"reward": {"alpah": 0.3}})
    msg = str(e.value)
    assert "reward.alpah" in msg and "alpha" in msg and "n_norm" in msg


def test_unknown_section() -> None:
    with pytest.raises(ConfigError, match="unknown key 'rewards'"):
        config_from_dict({"rewards": {}})


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"reward": {"alpha": "high"}}, "reward.alpha"),
        ({"coder": {"sampling": {"n": 2.5}}}, "coder.sampling.n"),
        ({"mistake_book": {"enabled": "yes"}}, "mistake_book.enabled"),
        ({"engine": {"mode": "shared"}}, "engine.mode"),
        ({"coder": {"optim": {"betas": [0.9]}}}, "coder.optim.betas"),
        ({"data": {"train": 3}}, "data.train"),
    ],
)
def test_wrong_type_names_field(raw: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        config_from_dict(raw)


def test_int_accepted_for_float_but_bool_is_not_int() -> None:
    assert config_from_dict({"reward": {"alpha": 1}}).reward.alpha == 1.0
    with pytest.raises(ConfigError):
        config_from_dict({"reward": {"n_norm": True}})


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"coder": {"sampling": {"n": 1}}}, "group size >= 2"),
        ({"reward": {"alpha": 1.5}}, "reward.alpha"),
        ({"tester": {"update_n": 9}}, "update_n"),
        ({"loss": {"dual_clip": 0.5}}, "dual_clip"),
        ({"train": {"method": "selfplay"}}, "blackbox"),
    ],
)
def test_invariants_fail_with_reason(raw: dict, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        config_from_dict(raw)


def test_overrides_apply_and_are_typed(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text("reward:\n  alpha: 0.25\n", encoding="utf-8")
    cfg = load_config(
        str(p), ["reward.alpha=0.75", "mistake_book.enabled=false", "engine.lora_targets=[q_proj]"]
    )
    assert cfg.reward.alpha == 0.75
    assert cfg.mistake_book.enabled is False
    assert cfg.engine.lora_targets == ("q_proj",)
    # YAML 1.1 reads 1e-4 (no dot) as a string; float fields accept it, other strings stay errors.
    assert load_config(str(p), ["coder.optim.lr=1e-4", "tester.optim.lr=2E+3"]).coder.optim.lr == 1e-4
    with pytest.raises(ConfigError, match="coder.optim.lr must be a number"):
        load_config(str(p), ["coder.optim.lr=fast"])
    with pytest.raises(ConfigError, match="reward.bogus"):
        load_config(str(p), ["reward.bogus=1"])
    with pytest.raises(ConfigError, match="section.field=value"):
        load_config(str(p), ["alpha"])


def test_unknown_preset_lists_known() -> None:
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config("no-such-preset")


def test_round_trip_through_dict() -> None:
    cfg = RunConfig()
    again = config_from_dict(cfg.to_dict())
    assert again == cfg


@pytest.mark.parametrize("preset", preset_names())
def test_every_shipped_preset_loads(preset: str) -> None:
    cfg = load_config(preset)
    assert cfg.preset == preset


RAY_ONLY_KEYS = {"engine.backend", "engine.rollout", "engine.vllm_kv_cache_gib", "preset"}
"""What a ``paper-*-ray`` preset may set differently from its ``paper-*`` preset (besides ``cluster``
and micro-batch sizes, which change memory, not the update)."""


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.mark.parametrize("size", ["1.5b", "3b", "7b"])
def test_ray_presets_are_the_paper_presets_on_a_cluster(size: str) -> None:
    local, ray = load_config(f"paper-{size}"), load_config(f"paper-{size}-ray")
    # The reference's 4 GPUs per role, 8 in all: for 1.5B and 3B the role's 2 learner ranks and 2
    # replicas have GPUs of their own (split); the 7B's 4 ranks and 4 replicas share them (colocate).
    placement = "colocate" if size == "7b" else "split"
    assert (ray.engine.backend, ray.engine.rollout, ray.cluster.placement) == ("ray", "vllm", placement)
    c = ray.cluster
    per_role = (
        max(c.learner_workers, c.rollout_replicas)
        if placement == "colocate"
        else c.learner_workers + c.rollout_replicas
    )
    assert per_role == 4 and c.gpus_per_worker == 1
    assert ray.engine.vllm_kv_cache_gib > 0  # the default (whole batch at full length) exceeds a GPU
    base = _flat(local.to_dict())
    kept = {k: v for k, v in _flat(ray.to_dict()).items() if not k.startswith("cluster.")}
    differ = {k for k, v in kept.items() if not k.endswith(".micro_batch_size") and base[k] != v}
    assert differ == RAY_ONLY_KEYS


def test_derived_engine_and_loss_facts_have_one_home() -> None:
    cfg = config_from_dict({"engine": {"coder_model": "a", "lora_r": 8, "lora_alpha": 32}})
    assert cfg.engine.lora_scale == 4.0
    assert (cfg.engine.role_model("coder"), cfg.engine.role_model("tester")) == ("a", "a")
    cfg = with_values(cfg, {"engine.tester_model": "b"})
    assert (cfg.engine.role_model("coder"), cfg.engine.role_model("tester")) == ("a", "b")
    assert cfg.loss.keeps_reference and not cfg.loss.needs_entropy  # kl 0.001, entropy 0 by default
    cfg = with_values(cfg, {"loss.kl_coef": 0.0, "loss.entropy_coef": 0.01})
    assert not cfg.loss.keeps_reference and cfg.loss.needs_entropy
    assert "lora_scale" not in cfg.to_dict()["engine"] and "keeps_reference" not in cfg.to_dict()["loss"]


def test_a_checked_configuration_cannot_change() -> None:
    """Issue 34, item 2: a value set after :func:`check_invariants` was never checked; the
    configuration and each of its sections are frozen."""
    cfg = load_config("demo-cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.preset = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.engine.device = "cpu"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.coder.sampling.n = 1  # type: ignore[misc]
    assert cfg.coder.sampling.n == load_config("demo-cpu").coder.sampling.n


def test_a_changed_configuration_is_checked_again() -> None:
    """``with_values`` (and ``dataclasses.replace`` of a RunConfig) builds a new configuration,
    checked like a loaded one; the original is left as it was."""
    cfg = load_config("demo-cpu")
    wider = with_values(cfg, {"coder.sampling.max_new_tokens": 4096, "engine.device": "cpu"})
    assert (wider.coder.sampling.max_new_tokens, wider.engine.device) == (4096, "cpu")
    assert wider.tester == cfg.tester and cfg.coder.sampling.max_new_tokens != 4096
    with pytest.raises(ConfigError, match="GRPO needs a group size >= 2"):
        with_values(cfg, {"coder.sampling.n": 1})
    with pytest.raises(ConfigError, match=r"coder.sampling.n=1000 exceeds the maximum"):
        with_values(cfg, {"coder.sampling.n": 1000})
    with pytest.raises(ConfigError, match="reward.alpha"):
        dataclasses.replace(cfg, reward=dataclasses.replace(cfg.reward, alpha=2.0))
    with pytest.raises(ConfigError, match="unknown key 'nope'"):
        with_values(cfg, {"engine.nope": 1})


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("engine.cpu_malloc=", "engine.cpu_malloc is empty; give one of 'system', 'tcmalloc'"),
        ("train.seed=", "train.seed must be an integer, got nothing (an empty value)"),
        ("eval.data=", "eval.data must be a string, got nothing (an empty value)"),
    ],
)
def test_an_empty_override_says_it_is_empty(item: str, message: str) -> None:
    """Issue 45, item 17: ``--set engine.cpu_malloc=`` was reported as ``engine.cpu_malloc=None``."""
    with pytest.raises(ConfigError) as e:
        load_config("tiny-cpu", [item])
    assert message in str(e.value) and "None" not in str(e.value)


@pytest.mark.parametrize(
    ("targets", "refused"),
    [
        ("[q_proj,v_proj]", "k_proj"),  # part of qkv_proj
        ("[gate_proj,down_proj]", "up_proj"),  # part of gate_up_proj
        ("[q_proj,k_proj,v_proj,o_proj]", ""),  # whole fused groups
        ("[o_proj,down_proj]", ""),  # no fused layer touched
    ],
)
def test_adapters_that_cover_part_of_a_layer_vllm_fuses_are_refused(targets: str, refused: str) -> None:
    """vLLM loads q/k/v (gate/up) into one fused layer; a sync of part of it would rebuild the layer
    from uninitialised memory and copy the rest over the live weights."""
    sets = ["engine.mode=adapters", f"engine.lora_targets={targets}"]
    if refused:
        with pytest.raises(ConfigError, match=f"without {refused}.*engine.rollout=transformers") as e:
            load_config("tiny-cpu", sets)
        assert "\n" not in str(e.value)
    else:
        load_config("tiny-cpu", sets)
    load_config("tiny-cpu", [*sets, "engine.rollout=transformers"])  # no vLLM: no fused layer
