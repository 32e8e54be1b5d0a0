"""The training loop end to end with the deterministic byte-level fakes and the cli's built-in
script: metric keys, Mistake Book growth, checkpoints, samples, methods, resume equivalence, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import torch
from trainer_fakes import build_models, problems

from codea1.checkpoint import latest_checkpoint, list_checkpoints
from codea1.config import load_config
from codea1.data.problem_sampler import ProblemSampler
from codea1.tracking import read_metrics
from codea1.trainer import Trainer, side_by_side

BASE = [
    "engine.kind=scripted", "data.problems_per_step=2", "coder.sampling.n=4", "tester.sampling.n=3",
    "train.save_every=1", "train.keep_last=5", "tracking.tensorboard=false", "tracking.progress=plain",
    "tracking.samples_per_step=3", "train.steps=2",
]  # fmt: skip


@pytest.fixture(scope="module")
def sandbox():
    """The real sandbox (two workers, shared by the module's tests)."""
    from codea1.config import SandboxConfig
    from codea1.sandbox.local import Sandbox

    with Sandbox(SandboxConfig(workers=2)) as sb:
        yield sb


SANDBOX: list = []


@pytest.fixture(autouse=True)
def _use_sandbox(sandbox):
    SANDBOX[:] = [sandbox]


def make(tmp_path: Path, *extra: str, run: str = "run", shared: bool = False) -> Trainer:
    cfg = load_config("tiny-cpu", [*BASE, *extra])
    probs = problems()
    return Trainer(cfg, build_models(probs, shared=shared), probs, SANDBOX[0], tmp_path / run)


def book_rows(run_dir: Path) -> int:
    with sqlite3.connect(run_dir / "mistake_book.sqlite") as conn:
        return conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]


def test_two_steps_write_metrics_book_checkpoints_and_samples(tmp_path: Path) -> None:
    trainer = make(tmp_path)
    summary = trainer.run()
    run_dir = tmp_path / "run"
    assert summary.last_step == 2 and not summary.interrupted
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("coder/reward_mean", "tester/reward_mean", "exec/code_valid_rate", "exec/gen_pass_rate",
                "replay/book_size", "replay/added", "loss/coder/pg", "loss/tester/pg", "coder/zero_variance_groups",
                "tester/groups_selected", "time/coder_rollout", "time/execution", "time/update_coder", "time/step"):  # fmt: skip
        assert key in rows[-1], key
    assert {k.split("/")[0] for k in rows[-1] if "/" in k} <= {
        "coder",
        "tester",
        "exec",
        "replay",
        "loss",
        "time",
        "rollout",
        "memory",
    }
    assert 0 < rows[0]["memory/peak_rss_gib"] <= rows[1]["memory/peak_rss_gib"]  # a high-water mark
    assert rows[-1]["rollout/engine/scripted"] == 1.0
    models = trainer.models  # the trainer moved each learner's weights to its policy once per step
    assert models.coder_policy.weight_loads == 2 and models.tester_policy.weight_loads == 2
    assert rows[-1]["tester/groups_selected"] == 2  # update_n=1 code per problem
    assert rows[-1]["replay/book_size"] > 0 and book_rows(run_dir) == rows[-1]["replay/book_size"]
    assert [s for s, _ in list_checkpoints(run_dir)] == [1, 2]
    ckpt = latest_checkpoint(run_dir)[1]
    assert (ckpt / "coder" / "weights.safetensors").exists() and (ckpt / "tester" / "optimizer.pt").exists()
    assert (ckpt / "mistake_book.sqlite").exists() and (ckpt / "config.yaml").exists()
    samples = [json.loads(x) for x in (run_dir / "samples" / "step_000002.jsonl").read_text().splitlines()]
    assert {s["role"] for s in samples} == {"coder", "tester"} and len(samples) <= 6
    assert all(isinstance(s["reward"], float) and s["text"] for s in samples)
    assert not torch.equal(
        trainer.models.coder_learner.table, trainer.models.coder_learner.reference
    )  # the coder was updated


@pytest.mark.parametrize("method", ["golden", "selfplay"])
def test_baseline_methods_run(tmp_path: Path, method: str) -> None:
    extra = [f"train.method={method}"] + (["tester.view=blackbox"] if method == "selfplay" else [])
    trainer = make(tmp_path, *extra, shared=True)
    summary = trainer.run()
    rows = read_metrics(tmp_path / "run")
    assert summary.last_step == 2 and len(rows) == 2
    assert "loss/coder/pg" in rows[-1] and "loss/tester/pg" not in rows[-1]
    if method == "golden":
        assert "exec/golden_pass_rate" in rows[-1]
        # no Test LLM and no Mistake Book: their series are absent, not zeros
        assert not [k for k in rows[-1] if k.startswith(("tester/", "replay/"))]
    else:  # black-box suites: one shared group per problem, all trained
        assert rows[-1]["tester/trained_samples"] == 2 * 3 and rows[-1]["tester/groups"] == 2
        assert list((latest_checkpoint(tmp_path / "run")[1]).glob("tester")) == []  # one model saved once


def test_no_mistake_book_and_alpha_switches(tmp_path: Path) -> None:
    make(tmp_path, "mistake_book.enabled=false", "reward.alpha=1.0").run()
    rows = read_metrics(tmp_path / "run")
    assert not [k for k in rows[-1] if k.startswith("replay/")]  # no book, no replay series
    assert not (tmp_path / "run" / "mistake_book.sqlite").exists()
    assert rows[-1]["tester/adversarial_mean"] >= 0


def _final_state(trainer: Trainer) -> tuple[list[dict], torch.Tensor, torch.Tensor]:
    rows = [
        {k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))}
        for r in read_metrics(trainer.run_dir)
    ]
    return (
        rows,
        trainer.models.coder_learner.table.detach().clone(),
        trainer.models.tester_learner.table.detach().clone(),
    )


def test_resume_is_bit_identical(tmp_path: Path) -> None:
    straight = make(tmp_path, "train.steps=3", run="straight")
    straight.run()
    first = make(tmp_path, "train.steps=1", run="split")
    first.run()
    cfg_path = tmp_path / "split" / "checkpoints" / "step_000001" / "config.yaml"
    assert cfg_path.exists()
    resumed = make(tmp_path, "train.steps=3", run="split")
    summary = resumed.run(resume=True)
    assert summary.first_step == 2 and summary.last_step == 3
    rows_a, coder_a, tester_a = _final_state(straight)
    rows_b, coder_b, tester_b = _final_state(resumed)
    assert rows_a == rows_b
    assert torch.equal(coder_a, coder_b) and torch.equal(tester_a, tester_b)
    assert book_rows(tmp_path / "straight") == book_rows(tmp_path / "split")


def test_roles_on_devices_of_their_own_update_and_push_side_by_side_with_the_same_results(
    tmp_path: Path,
) -> None:
    """``updates_overlap`` (the Ray backend's ``split``): the coder's and the tester's updates run at
    once, and so do their pushes (each learner waits at a barrier the other must reach: one after
    the other would time out), and the run ends exactly where the sequential one does."""
    sequential = make(tmp_path, "train.steps=3", run="sequential")
    sequential.run()
    overlapped = make(tmp_path, "train.steps=3", run="overlapped")
    overlapped.models.updates_overlap = True
    meeting = threading.Barrier(2, timeout=30)
    met: list[str] = []
    for learner in (overlapped.models.coder_learner, overlapped.models.tester_learner):
        for name in ("train_step", "named_weights"):
            original = getattr(learner, name)

            def meet(*args, _original=original, _name=name, **kwargs):
                meeting.wait()
                met.append(_name)
                return _original(*args, **kwargs)

            setattr(learner, name, meet)
    overlapped.run()
    assert met.count("train_step") == met.count("named_weights") == 2 * 3
    rows_a, coder_a, tester_a = _final_state(sequential)
    rows_b, coder_b, tester_b = _final_state(overlapped)
    assert rows_a == rows_b
    assert torch.equal(coder_a, coder_b) and torch.equal(tester_a, tester_b)
    times = read_metrics(tmp_path / "overlapped")[-1]
    assert "time/update" in times and "time/update_coder" not in times


def test_side_by_side_returns_in_order_and_raises_the_first_failure() -> None:
    assert side_by_side(lambda: 1, lambda: 2) == [1, 2]
    ended: list[str] = []

    def fails() -> None:
        raise ValueError("the coder's update failed")

    def slow() -> str:
        time.sleep(0.2)
        ended.append("tester")
        return "done"

    with pytest.raises(ValueError, match="coder"):
        side_by_side(fails, slow)
    assert ended == ["tester"]  # the other job ran to its end before the failure was raised


def test_resume_rolls_back_a_book_that_ran_ahead(tmp_path: Path) -> None:
    """Crash after the book committed step 2 but before checkpoint 2: resume restores book 1."""
    make(tmp_path, "train.steps=2").run()
    run_dir = tmp_path / "run"
    import shutil

    shutil.rmtree(run_dir / "checkpoints" / "step_000002")  # as if the process died before it
    trainer = make(tmp_path, "train.steps=2")
    summary = trainer.run(resume=True)  # apply_step(2) would raise if the book were still at step 2
    assert summary.first_step == 2 and summary.last_step == 2
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]


def test_sigint_saves_and_stops(tmp_path: Path) -> None:
    trainer = make(tmp_path, "train.steps=5", "train.save_every=10")
    policy = trainer.models.tester_policy
    original = policy.generate

    def generate_then_interrupt(prompts, params):  # Ctrl-C arrives during the 2nd step's test rollout
        if policy.calls == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return original(prompts, params)

    policy.generate = generate_then_interrupt
    before = signal.getsignal(signal.SIGINT)  # default_int_handler, or SIG_IGN under nohup / `&`
    summary = trainer.run()
    assert summary.interrupted and summary.last_step == 1
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [1]  # step 2 was dropped, step 1 saved
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is restored
    resumed = make(tmp_path, "train.steps=2")
    assert resumed.run(resume=True).last_step == 2


def test_sampler_is_without_replacement_per_epoch() -> None:
    s = ProblemSampler(5, 2, seed=3)
    first_epoch = s.next() + s.next()
    assert len(set(first_epoch)) == 4
    state = s.state()
    third = s.next()  # tail of 1 dropped: a new epoch
    assert s.epoch == 1
    s2 = ProblemSampler(5, 2, seed=3)
    s2.load_state(state)
    assert s2.next() == third
    with pytest.raises(ValueError, match="exceeds"):
        ProblemSampler(1, 2, seed=0)


class _CountingLearner:
    """A learner stand-in that records the batches it is asked to step on."""

    def __init__(self) -> None:
        self.steps: list[list[float]] = []

    def logprobs(self, batch, reference: bool = False):  # noqa: ANN001, ANN201
        return [tuple(0.0 for _ in c) for c in batch.completion_ids]

    def train_step(self, batch, loss_fn):  # noqa: ANN001, ANN201
        self.steps.append(list(batch.advantages))
        return {"loss/total": 0.5}


def _role_batch(advantages: list[float]):  # noqa: ANN202
    from codea1.engine.base import TrainBatch
    from codea1.rollout import RoleBatch

    n = len(advantages)
    train = TrainBatch([(1, 2)] * n, [(3, 4)] * n, advantages)
    return RoleBatch(train, [(0.0, 0.0)] * n, [0.0] * n, [(0, 0, i) for i in range(n)], ["x"] * n)


# today's cut points of the trainer's mini-batches (np.linspace rounded, half to even): kept bit for bit
MINI_BATCH_CUTS = {
    (5, 2): [(0, 2), (2, 5)],
    (9, 2): [(0, 4), (4, 9)],
    (10, 3): [(0, 3), (3, 7), (7, 10)],
    (10, 4): [(0, 2), (2, 5), (5, 8), (8, 10)],
    (6, 4): [(0, 2), (2, 3), (3, 4), (4, 6)],
    (12, 3): [(0, 4), (4, 8), (8, 12)],
}


@pytest.mark.parametrize(("count", "parts"), list(MINI_BATCH_CUTS))
def test_the_trainer_the_ray_shares_and_the_learner_cut_at_the_same_points(
    tmp_path: Path, count: int, parts: int
) -> None:
    """Issue 34, item 4: one cut rule (``core.cuts``). The trainer's mini-batches and the Ray
    backend's shares are :func:`~codea1.core.cuts.even_cuts`; the learner's micro-batches cap a
    piece's size instead, and cut at the same points where ``micro_batch_size`` divides the batch."""
    from codea1.config import OptimConfig
    from codea1.engine.hf_local.learner import micro_batches
    from codea1.engine.ray_cluster.shares import spans

    trainer = make(tmp_path, f"coder.optim.mini_batches={parts}", "loss.old_logprobs=recompute")
    learner = _CountingLearner()
    stats = trainer._update_role("coder", learner, _role_batch([float(i) for i in range(count)]))
    seen = [(int(step[0]), int(step[-1]) + 1) for step in learner.steps]
    assert seen == MINI_BATCH_CUTS[(count, parts)] == spans(count, parts)
    assert stats["loss/coder/optimizer_steps"] == parts and stats["loss/coder/total"] == 0.5
    if count % parts == 0:
        micro = micro_batches([8] * count, OptimConfig(micro_batch_size=count // parts))
        assert [(r.start, r.stop) for r in micro] == seen


@pytest.mark.parametrize("skip", [False, True])
def test_skip_without_signal_leaves_the_learner_alone_only_when_every_advantage_is_zero(
    tmp_path: Path, skip: bool
) -> None:
    trainer = make(tmp_path, f"coder.optim.skip_without_signal={str(skip).lower()}")
    learner = _CountingLearner()
    flat = trainer._update_role("coder", learner, _role_batch([0.0, 0.0, 0.0]))
    if skip:
        assert learner.steps == [] and flat["loss/coder/optimizer_steps"] == 0.0
        assert flat["loss/coder/skipped_without_signal"] == 1.0
    else:  # the paper's behaviour: a step on the KL term alone
        assert learner.steps == [[0.0, 0.0, 0.0]] and flat["loss/coder/optimizer_steps"] == 1.0
    learner.steps.clear()
    signal = trainer._update_role("coder", learner, _role_batch([0.0, 1.2, -1.2]))
    assert learner.steps == [[0.0, 1.2, -1.2]] and "loss/coder/skipped_without_signal" not in signal
