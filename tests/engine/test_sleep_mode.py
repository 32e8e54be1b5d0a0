"""vLLM's sleep mode where engines share a GPU with learners (``engine.sleep_mode``, the policy's
sync and rollout, the local backend's learners): the order of vLLM's calls, with a fake engine
(sleep mode is CUDA-only in vLLM, so no real engine can sleep here)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from codea1.engine.hf_local.learner import HFLearner, move_optimizer_state
from codea1.engine.sleep_mode import EngineSleep


class FakeSleepingLLM:
    """Records the calls of vLLM's ``LLM`` that sleeping and a weight sync make."""

    def __init__(self, calls: list[str] | None = None) -> None:
        self.calls = [] if calls is None else calls

    def sleep(self, level: int = 1) -> None:
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.calls.append(f"wake_up({','.join(tags or ['all'])})")

    def collective_rpc(self, method: Any, **kwargs: Any) -> list[Any]:
        self.calls.append(f"rpc {getattr(method, '__name__', method)}")
        return [None]

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset_prefix_cache")


def test_sleep_wakes_the_weights_then_the_kv_cache_each_once() -> None:
    llm = FakeSleepingLLM()
    sleeper = EngineSleep(llm, enabled=True)
    hooks: list[str] = []
    sleeper.before_wake.append(lambda: hooks.append(f"offload before {len(llm.calls)} calls"))
    sleeper.wake()  # awake as started: nothing to do
    sleeper.sleep()
    sleeper.sleep()  # already asleep
    sleeper.wake_weights()
    sleeper.wake_weights()
    sleeper.wake_kv_cache()
    sleeper.wake()
    assert llm.calls == ["sleep(1)", "wake_up(weights)", "wake_up(kv_cache)"]
    assert hooks == ["offload before 1 calls"]  # the learners leave before any part wakes
    assert sleeper.calls == {"sleep": 1, "wake_weights": 1, "wake_kv_cache": 1}


def test_an_engine_that_cannot_sleep_is_never_asked_to() -> None:
    llm = FakeSleepingLLM()
    sleeper = EngineSleep(llm, enabled=False)  # a CPU engine, or one alone on its GPU
    sleeper.sleep()
    sleeper.wake()
    assert llm.calls == [] and sleeper.state == "awake"


def test_a_sync_into_a_sleeping_engine_wakes_weights_loads_then_wakes_the_kv_cache(monkeypatch) -> None:
    """The order of a sync into a sleeping engine, torch's cache given back to the GPU between the
    send (its staging buffer and casts) and the KV cache's wake (CUDA is stood in for: the engine
    can sleep only there, and ``empty_cache`` is recorded)."""
    from codea1.engine.vllm_local.policy import VLLMRollout

    llm = FakeSleepingLLM()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: llm.calls.append("empty_cache"))
    rollout = VLLMRollout(llm, in_process=True, dtype=torch.float32, sleeps=True)

    class FakeSender:  # the transfer itself (vLLM's weight-transfer API) is tested elsewhere
        def send(self, weights: Any, dtype: Any) -> tuple[int, int]:
            llm.calls.append(f"rpc send {sorted(weights)}")
            return 8, 1

    rollout._sender = FakeSender  # type: ignore[method-assign]
    rollout.sleeper.sleep()
    rollout.load_weights({"w": torch.zeros(2)})
    loaded = [c for c in llm.calls if c.startswith("rpc")]
    assert loaded and llm.calls == [
        "sleep(2)",  # full weights: every sync overwrites them all, nothing is backed up
        "wake_up(weights)",
        *loaded,
        "empty_cache",
        "wake_up(kv_cache)",
        "reset_prefix_cache",
    ]
    llm.calls.clear()
    rollout.load_weights({"w": torch.ones(2)})  # awake: a sync wakes nothing
    assert not [c for c in llm.calls if c.startswith(("sleep", "wake"))]


def test_the_sleep_level_follows_the_kind_of_sync() -> None:
    """``separate`` mode (full weights, every sync writes them all) sleeps at level 2, which discards
    the weights instead of copying them to host memory and back; ``adapters`` mode (a sync writes the
    adapted projections only) at level 1, which keeps the rest."""
    from codea1.engine.vllm_local.policy import VLLMRollout

    separate, adapters = FakeSleepingLLM(), FakeSleepingLLM()
    VLLMRollout(separate, in_process=False, dtype=None, sleeps=True).sleeper.sleep()
    base = {"model.layers.0.self_attn.q_proj.weight": torch.zeros(2, 2)}
    VLLMRollout(adapters, in_process=False, dtype=None, sleeps=True, base=base).sleeper.sleep()
    assert (separate.calls, adapters.calls) == (["sleep(2)"], ["sleep(1)"])


def test_an_engine_woken_from_level_2_samples_only_after_a_sync() -> None:
    """Level 2 discards the weights: waking to sample before a sync wrote them is an error, not a
    rollout from undefined memory; after a sync it samples."""
    llm = FakeSleepingLLM()
    sleeper = EngineSleep(llm, enabled=True, level=2)
    sleeper.sleep()
    with pytest.raises(RuntimeError, match="before a weight sync"):
        sleeper.wake()
    assert llm.calls == ["sleep(2)", "wake_up(weights)"]  # the KV cache stays released
    sleeper.loaded()
    sleeper.wake()
    assert llm.calls[-1] == "wake_up(kv_cache)"
    one = EngineSleep(FakeSleepingLLM(), enabled=True, level=1)  # level 1 keeps them
    one.sleep()
    one.wake()
    assert one.state == "awake"
    with pytest.raises(ValueError, match="1 or 2"):
        EngineSleep(llm, enabled=True, level=3)


class FakeLearner:
    def __init__(self) -> None:
        self.before_work: list[Any] = []


def test_the_local_learners_put_every_engine_to_sleep_before_they_compute() -> None:
    from codea1.engine.vllm_local.policy import VLLMRollout
    from codea1.engine.vllm_local.roles import sleep_before_learners

    calls: list[str] = []
    engines = [VLLMRollout(FakeSleepingLLM(calls), in_process=False, dtype=None, sleeps=True) for _ in "ct"]
    coder, tester = FakeLearner(), FakeLearner()
    roles = type("Roles", (), {"coder_learner": coder, "tester_learner": tester})()
    sleep_before_learners(roles, [engines[0], engines[1], engines[0]])  # self-play repeats an engine
    assert len(coder.before_work) == len(tester.before_work) == 2
    for hook in coder.before_work:
        hook()
    assert calls == ["sleep(2)", "sleep(2)"]  # separate mode: full weights, level 2
    shared = type("Roles", (), {"coder_learner": coder, "tester_learner": coder})()
    sleep_before_learners(shared, engines[:1])
    assert len(coder.before_work) == 3  # one learner playing both roles gets the hook once


def tiny_learner() -> HFLearner:
    from codea1.config import OptimConfig
    from codea1.engine.hf_local.weights import FullWeights

    model = torch.nn.Linear(2, 2)
    weights = FullWeights(model, keep_reference=False)
    return HFLearner(weights, OptimConfig(), 1, temperature=1.0, pad_id=0)


class Computed(Exception):
    """Raised by a hook to stop the learner before it computes anything."""


def test_the_learners_hooks_run_before_it_computes() -> None:
    learner = tiny_learner()
    seen: list[str] = []

    def hook() -> None:
        seen.append("engines asleep")
        raise Computed

    learner.before_work.append(hook)
    with pytest.raises(Computed):
        learner.logprobs(None)  # type: ignore[arg-type]
    with pytest.raises(Computed):
        learner.train_step(None, None)  # type: ignore[arg-type]
    assert seen == ["engines asleep", "engines asleep"]


def test_offloading_on_a_cpu_moves_nothing_and_the_state_moves_but_its_step() -> None:
    learner = tiny_learner()
    learner.offload()
    assert learner.home is None  # nothing to free on a CPU
    for p in learner.params.values():
        p.grad = torch.ones_like(p)
    learner.optimizer.step()
    param = next(iter(learner.params.values()))
    state = learner.optimizer.state[param]
    assert move_optimizer_state(learner.optimizer, torch.device("meta")) == 2 * len(learner.params)
    assert state["exp_avg"].device.type == "meta" and state["exp_avg_sq"].device.type == "meta"
    assert state["step"].device.type == "cpu"  # AdamW's counter stays where the optimizer keeps it
