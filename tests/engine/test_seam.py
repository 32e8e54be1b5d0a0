"""The engine seam of ``engine/base.py``: a batch is cut with ``TrainBatch.slice`` and joined with
``TrainBatch.concat``; every role container is a ``Roles`` (with ``close``), every policy has a
``name`` and ``last_stats``."""

from __future__ import annotations

import dataclasses

import pytest

from codea1.config import load_config
from codea1.engine.base import Policy, TrainBatch


def batch(n: int = 5, *, old: bool = True, ref: bool = True) -> TrainBatch:
    return TrainBatch(
        prompt_ids=[(i,) for i in range(n)],
        completion_ids=[tuple(range(i + 1)) for i in range(n)],
        advantages=[i / 10 for i in range(n)],
        old_logprobs=[(-float(i),) * (i + 1) for i in range(n)] if old else None,
        ref_logprobs=[(-2.0 * i,) * (i + 1) for i in range(n)] if ref else None,
    )


def test_slice_cuts_every_per_sequence_field() -> None:
    tb = batch(3, ref=False)
    part = tb.slice(1, 3)
    assert part.prompt_ids == [(1,), (2,)] and part.completion_ids == [(0, 1), (0, 1, 2)]
    assert part.advantages == [0.1, 0.2] and part.old_logprobs == [(-1.0, -1.0), (-2.0, -2.0, -2.0)]
    assert part.ref_logprobs is None
    assert len(tb.slice(2, 10)) == 1 and len(tb.slice(5, 9)) == 0  # past the end: as a list slice


@pytest.mark.parametrize(("old", "ref"), [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("cuts", [[0, 5], [0, 2, 5], [0, 1, 1, 4, 5], [0, 3, 5, 8]])
def test_concat_of_slices_is_the_batch(cuts: list[int], old: bool, ref: bool) -> None:
    tb = batch(5, old=old, ref=ref)
    parts = [tb.slice(lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)]
    assert TrainBatch.concat(parts) == tb


def test_concat_refuses_an_optional_field_set_on_some_batches_only() -> None:
    with pytest.raises(ValueError, match="old_logprobs"):
        TrainBatch.concat([batch(2), batch(2, old=False)])
    assert TrainBatch.concat([]) == TrainBatch([], [], [])


def test_train_batch_has_only_per_sequence_fields() -> None:
    names = {f.name for f in dataclasses.fields(TrainBatch)}
    assert names == {"prompt_ids", "completion_ids", "advantages", "old_logprobs", "ref_logprobs"}


def role_containers() -> list[type]:
    from codea1.engine.hf_local import LocalRoles
    from codea1.engine.ray_cluster import RayRoles
    from codea1.engine.scripted_roles import ScriptedRoles

    return [LocalRoles, RayRoles, ScriptedRoles]


@pytest.mark.parametrize("container", role_containers(), ids=lambda c: c.__name__)
def test_every_role_container_is_a_roles(container: type) -> None:
    fields = {f.name for f in dataclasses.fields(container)}
    assert {"coder_policy", "coder_learner", "tester_policy", "tester_learner"} <= fields
    assert callable(container.close)


@pytest.mark.parametrize("method", ["a1", "selfplay", "golden"])
def test_build_returns_roles_that_close(method: str) -> None:
    from codea1.engine.build import build
    from codea1.engine.scripted import ScriptedLearner, ScriptedPolicy

    extra = ["tester.view=blackbox"] if method == "selfplay" else []
    roles = build(load_config("tiny-cpu", ["engine.kind=scripted", f"train.method={method}", *extra]))
    assert isinstance(roles.coder_policy, ScriptedPolicy)
    assert isinstance(roles.tester_learner, ScriptedLearner)
    assert (roles.tester_learner is roles.coder_learner) == (method != "a1")
    roles.close()  # a no-op for the engines in this process


def policy_classes() -> list[type]:
    from codea1.engine.hf_local import HFPolicy
    from codea1.engine.ray_cluster import RayPolicy
    from codea1.engine.scripted import ScriptedPolicy
    from codea1.engine.vllm_local.policy import VLLMPolicy

    return [HFPolicy, VLLMPolicy, RayPolicy, ScriptedPolicy]


@pytest.mark.parametrize("cls", policy_classes(), ids=lambda c: c.__name__)
def test_every_policy_has_a_name_and_last_stats(cls: type) -> None:
    set_in_init = cls.__init__.__code__.co_names  # attributes the constructor assigns
    assert isinstance(getattr(cls, "name", None), str) or "name" in set_in_init
    assert "last_stats" in set_in_init
    assert {"name", "last_stats"} <= set(Policy.__annotations__)
