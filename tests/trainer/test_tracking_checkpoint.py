"""Tracking sinks and checkpoint files in isolation."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from codea1.checkpoint import (
    TrainerState,
    capture_rng,
    latest_checkpoint,
    list_checkpoints,
    restore_rng,
    save_checkpoint,
)
from codea1.config import load_config
from codea1.engine.scripted import ScriptedLearner
from codea1.tracking import Tracker, TrackingError, read_metrics, truncate_metrics


def test_metrics_lines_truncation_and_torn_tail(tmp_path: Path) -> None:
    tr = Tracker(tmp_path, total_steps=3, tensorboard=True, progress="rich")
    for step in (1, 2, 3):
        with tr.phase("work"):
            pass
        row = tr.log(step, {"coder/reward_mean": 0.5, "loss/coder/pg": float("nan")})
        assert row["time/work"] >= 0 and row["loss/coder/pg"] is None
    tr.save_samples(3, [{"role": "coder", "text": "x"}])
    tr.close()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "coder/rew')  # a torn line from a crash
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    truncate_metrics(tmp_path, 2)
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 2
    assert json.loads((tmp_path / "samples" / "step_000003.jsonl").read_text())["role"] == "coder"


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_wandb_missing_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TrackingError, match="pip install"):
        Tracker(tmp_path, total_steps=1, tensorboard=False, wandb=True, progress="plain")


def test_rng_round_trip() -> None:
    state = capture_rng()
    a = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    restore_rng(json.loads(json.dumps(state)))
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == a


def test_checkpoints_are_atomic_and_pruned(tmp_path: Path) -> None:
    cfg = load_config("tiny-cpu")
    learner = ScriptedLearner()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_000009.tmp").mkdir()  # a half-written one from a crash
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, TrainerState(step, {"epoch": 0, "pos": step}, capture_rng()), cfg,
                        {"coder": learner}, None, keep_last=2)  # fmt: skip
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]
    step, path = latest_checkpoint(tmp_path)
    assert step == 3 and (path / "coder" / "weights.safetensors").exists() and (path / "config.yaml").exists()
