"""``codea1.engine.memory``: the plan of each GPU (engine fractions, KV caches, ``max_num_seqs``) and
the replay of vLLM's start-up rule on it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from codea1.config import load_config
from codea1.engine import memory as mem

QWEN_1_5B = mem.ModelShape("Qwen/Qwen2.5-Coder-1.5B-Instruct", 28, 1536, 8960, 12, 2, 151936, tied=True)
QWEN_7B = mem.ModelShape("Qwen/Qwen2.5-Coder-7B-Instruct", 28, 3584, 18944, 28, 4, 152064, tied=False)
H200, H100 = 139.0, 79.0


def both(model: mem.ModelShape) -> dict[str, mem.ModelShape]:
    return {"coder": model, "tester": model}


def fraction_of_residents(plan: mem.GpuPlan) -> float:
    return plan.resident_gib / plan.total_gib


def test_a_shape_from_a_transformers_config_defaults_as_the_kv_formula_did() -> None:
    minimal = SimpleNamespace(
        num_attention_heads=9, num_key_value_heads=3, hidden_size=576, num_hidden_layers=30
    )
    shape = mem.ModelShape.from_hf_config(minimal)
    assert shape.head_dim == 64 and shape.kv_dim == 192 and shape.kv_bytes_per_token(4) == 2 * 30 * 3 * 64 * 4
    explicit = SimpleNamespace(**vars(minimal), head_dim=128, vocab_size=10, tie_word_embeddings=True)
    assert mem.ModelShape.from_hf_config(explicit).kv_dim == 3 * 128


def test_two_engines_beside_the_learners_share_one_gpu_within_its_memory() -> None:
    cfg = load_config("paper-1.5b", ["engine.rollout=vllm"])
    plan = mem.local_plan(cfg, both(QWEN_1_5B), H200, shared=False)
    assert not plan.problem
    assert [e.what for e in plan.engines] == ["coder engine", "tester engine"]  # the order they start in
    assert fraction_of_residents(plan) + sum(e.utilization for e in plan.engines) <= 1
    assert all(e.utilization <= mem.MAX_UTILIZATION for e in plan.engines)
    for e in plan.engines:  # each fraction covers what the engine holds
        assert e.used_gib - mem.ENGINE_CONTEXT_GIB <= e.utilization * H200
        assert e.full_sequences >= cfg.coder.sampling.n
    replay = mem.startup_replay(plan)
    assert replay.violations == ()
    assert [s.what for s in replay.starts] == ["coder engine", "tester engine"]
    first, second = replay.starts
    assert second.free_gib < first.free_gib  # the second engine sees the first one's memory gone
    assert all(s.free_gib >= s.requested_gib for s in replay.starts)
    assert replay.peak_gib <= H200 - mem.headroom_gib(H200) + 0.01


def test_the_local_learners_count_fp32_state_references_once_and_one_update_at_a_time() -> None:
    cfg = load_config("paper-1.5b", ["engine.rollout=vllm"])
    plan = mem.local_plan(cfg, both(QWEN_1_5B), H200, shared=False)
    held = {r.what: r.gib for r in plan.asleep}  # while the engines sleep and a learner computes
    p = QWEN_1_5B.params
    assert held["coder learner"] == pytest.approx(16 * p / mem.GIB)  # fp32 weights, grads, AdamW m and v
    assert "tester reference" not in held  # both roles start from one model: one shared reference
    assert held["coder reference"] == pytest.approx(2 * p / mem.GIB)
    worst = max(
        mem.learner_memory(cfg, role, QWEN_1_5B, local=True).activations for role in ("coder", "tester")
    )
    mask = (1 << 28) * 5 / mem.GIB  # the shared-prompt mask at the learner's limit, 5 bytes an element
    assert mem.shared_mask_gib(cfg.engine) == pytest.approx(mask)
    assert held["activations"] == pytest.approx(
        worst + 2 * p / mem.GIB + mask
    )  # one update at a time + autocast's copy + the mask
    assert held["coder engine, asleep"] == held["tester engine, asleep"] == mem.ENGINE_FIXED_GIB
    awake = {r.what: r.gib for r in plan.residents}  # beside the awake engines: no gradients
    assert awake["coder learner at rest"] == pytest.approx(12 * p / mem.GIB) and "activations" not in awake
    assert plan.used_gib == max(plan.awake_gib, plan.asleep_gib)
    different = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, tester_model="other/model"))
    two = {r.what for r in mem.local_plan(different, both(QWEN_1_5B), H200, shared=False).residents}
    assert {"coder reference", "tester reference"} <= two


def test_self_play_plans_one_learner_and_one_engine() -> None:
    cfg = load_config("paper-1.5b", ["engine.rollout=vllm"])
    plan = mem.local_plan(cfg, {"coder": QWEN_1_5B}, H200, shared=True)
    assert [e.what for e in plan.engines] == ["engine"] and not plan.problem
    assert [r.what for r in plan.asleep if "learner" in r.what] == ["coder learner"]
    assert mem.startup_replay(plan).violations == ()


def test_no_room_for_a_kv_cache_is_a_problem_not_a_plan() -> None:
    plan = mem.local_plan(load_config("paper-7b"), both(QWEN_7B), H200, shared=False)
    assert plan.problem.startswith("coder engine: 0.0 GiB left for its KV cache")
    assert "8 sequences of 12,288 tokens" in plan.problem and "on a 139.0 GiB GPU" in plan.problem


def test_a_split_replica_with_the_presets_kv_cache_gets_a_consistent_fraction() -> None:
    cfg = load_config("paper-1.5b-ray")
    plan = mem.replica_plan(cfg, ["coder"], QWEN_1_5B, H100)
    (engine,) = plan.engines
    assert engine.kv_bytes == 56 * (1 << 30)  # engine.vllm_kv_cache_gib, as given
    assert (
        engine.utilization == pytest.approx(mem.utilization(engine.used_gib - mem.ENGINE_CONTEXT_GIB, H100))
        and engine.utilization < 0.8
    )
    assert mem.startup_replay(plan).violations == ()
    derived = mem.replica_plan(
        load_config("paper-1.5b-ray", ["engine.vllm_kv_cache_gib=0"]), ["coder"], QWEN_1_5B, H100
    )
    assert derived.engines[0].utilization <= mem.MAX_UTILIZATION and derived.engines[0].kv_gib > 56


def test_a_colocated_replica_sleeps_while_the_rank_computes_and_the_rank_is_offloaded_beside_it() -> None:
    cfg = load_config("paper-1.5b-ray", ["cluster.placement=colocate", "engine.vllm_kv_cache_gib=0"])
    plan = mem.replica_plan(cfg, ["tester"], QWEN_1_5B, H100)
    rank = mem.learner_memory(cfg, "tester", QWEN_1_5B).total_fp32_states
    assert plan.residents[0] == mem.Resident("tester learner rank, offloaded", mem.LEARNER_OVERHEAD_GIB)
    assert plan.asleep[0] == mem.Resident("tester learner rank", rank)
    assert plan.asleep_gib == pytest.approx(rank + mem.PROCESS_CONTEXT_GIB + mem.ENGINE_FIXED_GIB)
    assert not plan.problem and plan.awake_gib <= H100 - mem.headroom_gib(H100) + 1e-9
    assert mem.startup_replay(plan).violations == ()
    seven = mem.replica_plan(load_config("paper-7b-ray"), ["coder"], QWEN_7B, H100)  # shipped: colocate
    assert not seven.problem and mem.startup_replay(seven).violations == ()
    assert seven.engines[0].max_num_seqs == 256  # the preset's 44 GiB hold the sampling batch's sequences
    assert H100 - seven.used_gib >= 0.05 * H100
    squeezed = mem.replica_plan(
        load_config(
            "paper-7b-ray",
            ["cluster.learner_workers=1", "cluster.rollout_replicas=1", "engine.vllm_kv_cache_gib=0"],
        ),
        ["coder"], QWEN_7B, H100,
    )  # fmt: skip
    assert "while the engines sleep and the learners compute" in squeezed.problem


def test_the_headroom_is_a_share_of_the_gpu() -> None:
    cfg = load_config("paper-1.5b-ray")
    plan = mem.replica_plan(cfg, ["coder"], QWEN_1_5B, H100)
    tight = dataclasses.replace(plan, total_gib=plan.used_gib + 0.02 * H100)
    (violation,) = mem.startup_replay(tight).violations[-1:]
    assert "under the 5% headroom" in violation
    derived = mem.replica_plan(
        load_config("paper-1.5b-ray", ["engine.vllm_kv_cache_gib=0"]), ["coder"], QWEN_1_5B, H200
    )
    assert H200 - derived.used_gib >= mem.headroom_gib(H200) - 1e-6 and mem.headroom_gib(H200) == 0.05 * H200


def test_the_plans_mask_limit_is_the_learners() -> None:
    from codea1.engine.hf_local import logprobs

    assert mem.MAX_MASK_ELEMENTS == logprobs.MAX_MASK_ELEMENTS
    off = load_config("paper-1.5b-ray", ["engine.share_prompts=false"])
    assert mem.learner_memory(off, "coder", QWEN_1_5B).mask == 0.0


def test_without_checkpointing_every_layer_keeps_its_activations() -> None:
    on = load_config("paper-1.5b-ray")
    off = load_config("paper-1.5b-ray", ["engine.gradient_checkpointing=false"])
    kept, all_layers = (mem.learner_memory(c, "coder", QWEN_1_5B).activations for c in (on, off))
    tokens = 32768
    per_layer = tokens * QWEN_1_5B.layer_activation_bytes_per_token(2) / mem.GIB
    assert all_layers - kept == pytest.approx(
        (QWEN_1_5B.layers - 1) * per_layer - QWEN_1_5B.layers * tokens * QWEN_1_5B.hidden * 2 / mem.GIB
    )


def test_split_and_colocate_plan_every_kind_of_gpu() -> None:
    split = mem.ray_plans(load_config("paper-1.5b-ray"), both(QWEN_1_5B), H100, shared=False)
    assert [p.what for p in split] == [
        "coder learner rank",
        "tester learner rank",
        "coder replica",
        "tester replica",
    ]
    cfg = load_config("paper-1.5b-ray", ["cluster.placement=colocate", "engine.vllm_kv_cache_gib=0"])
    colocated = mem.ray_plans(cfg, both(QWEN_1_5B), H100, shared=False)
    assert [p.what for p in colocated] == [
        "coder learner rank + coder replica",
        "tester learner rank + tester replica",
    ]


def test_max_num_seqs_follows_the_kv_cache_under_the_batch_size_and_a_maximum() -> None:
    cfg = load_config("paper-1.5b-ray")
    token = QWEN_1_5B.kv_bytes_per_token(2)
    length = mem.max_model_len(cfg)
    small = mem.replica_plan(
        load_config("paper-1.5b-ray", ["engine.vllm_kv_cache_gib=2"]), ["coder"], QWEN_1_5B, H100
    )
    assert small.engines[0].max_num_seqs == (2 << 30) // token // (length // mem.SEQUENCE_SHARE)
    assert mem.replica_plan(cfg, ["coder"], QWEN_1_5B, H100).engines[0].max_num_seqs == 256  # the batch size
    wide = load_config("paper-1.5b-ray", ["coder.sampling.batch_size=4096", "engine.vllm_kv_cache_gib=100"])
    assert mem.replica_plan(wide, ["coder"], QWEN_1_5B, H200).engines[0].max_num_seqs == mem.MAX_NUM_SEQS


def test_the_replay_catches_a_kv_cache_that_overflows_the_gpu() -> None:
    too_big = load_config("paper-1.5b-ray", ["engine.vllm_kv_cache_gib=74"])
    violations = mem.startup_replay(mem.replica_plan(too_big, ["coder"], QWEN_1_5B, H100)).violations
    assert any("vLLM refuses to start" in v for v in violations)
    assert any("exceeds the GPU" in v for v in violations)
    impossible = load_config("paper-1.5b-ray", ["engine.vllm_kv_cache_gib=90"])
    assert "exceeds a 79.0 GiB GPU" in mem.replica_plan(impossible, ["coder"], QWEN_1_5B, H100).problem


def test_the_replay_checks_each_engine_against_what_started_before_it() -> None:
    cfg = load_config("paper-1.5b", ["engine.rollout=vllm"])
    plan = mem.local_plan(cfg, both(QWEN_1_5B), H200, shared=False)
    greedy = dataclasses.replace(plan.engines[0], utilization=0.9)  # vLLM's kind of default
    violations = mem.startup_replay(dataclasses.replace(plan, engines=(greedy, plan.engines[1]))).violations
    assert len(violations) == 1 and violations[0].startswith("coder engine: vLLM refuses to start")
    tiny = dataclasses.replace(plan.engines[1], kv_bytes=plan.engines[1].kv_token_bytes * 100)
    violations = mem.startup_replay(dataclasses.replace(plan, engines=(plan.engines[0], tiny))).violations
    assert violations == (
        "tester engine: a KV cache of 100 tokens holds no 12,288-token sequence (vLLM refuses to start)",
    )


def test_a_learner_rank_alone_must_fit_its_gpu() -> None:
    cfg = load_config(
        "paper-3b-ray", ["tester.optim.micro_batch_size=16", "tester.optim.micro_batch_tokens=0"]
    )
    plan = mem.learner_plan(
        cfg, "tester", mem.ModelShape("3b", 36, 2048, 11008, 16, 2, 151936, tied=True), H100
    )
    assert mem.startup_replay(plan).violations[0].startswith("the peak")


def test_a_token_budget_sizes_the_worst_micro_batch() -> None:
    cfg = load_config("paper-1.5b-ray", ["tester.optim.micro_batch_tokens=32768"])
    assert mem.learner_memory(cfg, "tester", QWEN_1_5B).tokens == 32768
    long_rows = load_config("paper-1.5b-ray", ["tester.optim.micro_batch_tokens=1000"])
    assert mem.learner_memory(long_rows, "tester", QWEN_1_5B).tokens == 8192 + 4096  # one row alone
