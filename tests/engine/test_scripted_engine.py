"""The scripted fake engine: deterministic completions, a real (tiny) update, save/load."""

from __future__ import annotations

import torch

from codea1.engine.base import SamplingParams, TrainBatch
from codea1.engine.scripted import FAKE_LOGPROB, ScriptedLearner, ScriptedPolicy, byte_ids


def pg_loss(lp, old, ref, adv, mask, entropy=None):
    """Token-mean policy-gradient loss with a ratio (enough to move the fake learner)."""
    ratio = torch.exp(lp - old)
    loss = (-(ratio * adv[:, None]) * mask).sum() / mask.sum()
    return loss, {"ratio_mean": float(((ratio * mask).sum() / mask.sum()).detach())}


def test_policy_answers_from_a_function_prompt_major():
    policy = ScriptedPolicy(lambda prompt, j: f"{prompt[-2:]}#{j}")
    comps = policy.generate(["aa", "bb"], SamplingParams(n=2, max_new_tokens=50))
    assert [c.text for c in comps] == ["aa#0", "aa#1", "bb#0", "bb#1"]
    assert [c.prompt_index for c in comps] == [0, 0, 1, 1]
    assert comps[0].completion_ids == byte_ids("aa#0")
    assert comps[0].logprobs == (FAKE_LOGPROB,) * 4
    assert all(c.finished for c in comps)


def test_policy_cycles_a_list_and_truncates():
    policy = ScriptedPolicy(["hello", "x"])
    comps = policy.generate(["p"], SamplingParams(n=3, max_new_tokens=3))
    assert [c.text for c in comps] == ["hel", "x", "hel"]
    assert [c.finished for c in comps] == [False, True, False]
    assert policy.count_tokens("héllo") == 6
    assert policy.render([{"role": "user", "content": "hi"}]).endswith("<|assistant|>\n")


def test_learner_update_is_real_and_deterministic(tmp_path):
    batch = TrainBatch(
        prompt_ids=[(1,), (1,)], completion_ids=[byte_ids("ab"), byte_ids("c")], advantages=[1.0, -1.0]
    )
    a, b = ScriptedLearner(seed=3), ScriptedLearner(seed=3)
    before = a.logprobs(batch)
    assert a.logprobs(batch, reference=True) == before
    stats_a, stats_b = a.train_step(batch, pg_loss), b.train_step(batch, pg_loss)
    assert stats_a == stats_b and stats_a["ratio_mean"] == 1.0
    after = a.logprobs(batch)
    assert after[0][0] > before[0][0]  # positive advantage: more likely
    assert after[1][0] < before[1][0]  # negative advantage: less likely
    assert a.logprobs(batch, reference=True) == before
    a.save(tmp_path / "ck")
    c = ScriptedLearner(seed=99)
    c.load(tmp_path / "ck")
    assert c.logprobs(batch) == after and c.steps == 1
    a.train_step(batch, pg_loss)
    c.train_step(batch, pg_loss)
    assert c.logprobs(batch) == a.logprobs(batch)
