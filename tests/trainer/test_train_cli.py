"""``codea1 train`` end to end on the scripted engine, presets, and the slow SmolLM2 run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from codea1.cli import main
from codea1.config import load_config, preset_names
from codea1.tracking import read_metrics
from tests.demo_model import require_demo_model
from tests.scripted_run import SCRIPTED_RUN

FAST = SCRIPTED_RUN


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_loads_strictly(preset: str) -> None:
    cfg = load_config(preset)
    assert cfg.preset == preset
    if preset.startswith("paper-"):
        assert (cfg.data.problems_per_step, cfg.coder.sampling.n, cfg.tester.sampling.n) == (256, 8, 8)
        assert cfg.coder.sampling.max_new_tokens == cfg.tester.sampling.max_new_tokens == 4096
        assert (cfg.coder.optim.lr, cfg.coder.optim.weight_decay, cfg.coder.optim.warmup_steps) == (
            1e-6,
            0.1,
            10,
        )
        assert (cfg.loss.clip_low, cfg.loss.clip_high, cfg.loss.dual_clip, cfg.loss.kl_coef) == (
            0.2,
            0.28,
            10.0,
            0.001,
        )
        assert (cfg.train.steps, cfg.train.save_every, cfg.reward.alpha, cfg.tester.update_n) == (
            111,
            50,
            0.5,
            1,
        )
        assert cfg.engine.coder_model.startswith("Qwen/Qwen2.5-Coder-") and cfg.engine.dtype == "auto"


@pytest.mark.parametrize("method", ["a1", "golden", "selfplay"])
def test_cli_runs_each_method_on_the_scripted_engine(tmp_path: Path, method: str, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["train", *FAST, "--steps", "2", "--method", method, "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "finished step 2/2" in out and str(run_dir) in out
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]
    assert (run_dir / "config.yaml").exists() and (run_dir / "samples" / "step_000002.jsonl").exists()
    assert (run_dir / "checkpoints" / "step_000002" / "state.json").exists()


def test_cli_resume_continues_and_refuses_a_full_directory(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["train", *FAST, "--steps", "1", "--run-dir", str(run_dir)]) == 0
    assert main(["train", *FAST, "--steps", "1", "--run-dir", str(run_dir)]) == 2  # not empty
    assert "--resume" in capsys.readouterr().err
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg["train"]["steps"] = 2  # extend the finished run by one step
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", "--resume", str(run_dir), "--progress", "plain"]) == 0
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]


def test_resume_takes_only_where_the_run_executes_from_set(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["train", *FAST, "--steps", "1", "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    refused = main(["train", "--resume", str(run_dir), "--set", "coder.sampling.n=2"])
    err = capsys.readouterr().err
    assert refused == 2 and "coder.sampling.n=2" in err and "cluster.*" in err and err.count("\n") == 1
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg["train"]["steps"] = 2
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    moved = ["--set", "cluster.learner_workers=3", "--set", "engine.backend=local"]
    assert main(["train", "--resume", str(run_dir), "--progress", "plain", *moved]) == 0
    saved = load_config(str(run_dir / "checkpoints" / "step_000002" / "config.yaml"))
    assert saved.cluster.learner_workers == 3 and saved.coder.sampling.n == cfg["coder"]["sampling"]["n"]


def test_unset_model_variable_is_one_clear_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("CODEA1_QWEN_MODEL", raising=False)
    code = main(["train", "--preset", "qwen-coder-0.5b-cpu", "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "CODEA1_QWEN_MODEL" in err and err.count("\n") == 1


def test_sigkill_of_the_cli_loses_nothing_committed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "codea1", "train", *FAST, "--steps", "3", "--run-dir", str(run_dir),
           "--set", "data.problems_per_step=8", "--set", "coder.sampling.n=8", "--set", "tester.sampling.n=8"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("step 1/3") or (not line and proc.poll() is not None):
            break
    ckpt1 = run_dir / "checkpoints" / "step_000001"
    while time.monotonic() < deadline and not ckpt1.exists():
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)  # during step 2 (or, on a fast machine, just after it)
    proc.wait(timeout=30)
    text = (run_dir / "metrics.jsonl").read_text()
    assert text.endswith("\n")
    done = [json.loads(x)["step"] for x in text.splitlines()]
    assert done and done == list(range(1, len(done) + 1))
    assert (ckpt1 / "state.json").exists() or done[-1] >= 2  # complete, or pruned by a later one
    resumed = subprocess.run([sys.executable, "-m", "codea1", "train", "--resume", str(run_dir)],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2, 3]


def test_a_run_leaves_nothing_in_the_temporary_directory(tmp_path: Path) -> None:
    """Issue 35, item 9: building a torch optimizer imports ``torch._dynamo``, which creates
    ``$TMPDIR/torchinductor_<user>``; every run, even a scripted one, left it behind, empty. A cache
    that holds files, or one ``TORCHINDUCTOR_CACHE_DIR`` names, stays."""
    tmp, kept = tmp_path / "tmp", tmp_path / "tmp2"
    tmp.mkdir()
    kept.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    cmd = [sys.executable, "-m", "codea1", "train", *FAST, "--steps", "1"]
    done = subprocess.run([*cmd, "--run-dir", str(tmp_path / "run")], env={**env, "TMPDIR": str(tmp)},
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(tmp.iterdir()) == []
    used = kept / "torchinductor_mine"  # the user's own cache directory: left as it is
    done = subprocess.run([*cmd, "--run-dir", str(tmp_path / "run2")], timeout=300, capture_output=True,
                          env={**env, "TMPDIR": str(kept), "TORCHINDUCTOR_CACHE_DIR": str(used)})  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert used.is_dir()


def test_a_compile_cache_that_holds_files_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codea1.cli import compile_cache

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setattr(compile_cache.tempfile, "tempdir", str(tmp_path))
    made = Path(compile_cache.default_compile_cache())
    with compile_cache.no_empty_compile_cache():
        (made / "dynamo").mkdir(parents=True)
    assert not made.exists()  # made here, empty: removed
    with compile_cache.no_empty_compile_cache():
        (made / "fxgraph").mkdir(parents=True)
        (made / "fxgraph" / "entry").write_text("compiled")
    assert (made / "fxgraph" / "entry").exists()  # a real cache: kept


@pytest.mark.slow
def test_smollm2_one_step_writes_a_complete_run_dir(tmp_path: Path) -> None:
    require_demo_model()
    run_dir = tmp_path / "run"
    tiny = ["--set", "data.problems_per_step=1", "--set", "coder.sampling.n=2", "--set", "tester.sampling.n=2",
            "--set", "coder.sampling.max_new_tokens=24", "--set", "tester.sampling.max_new_tokens=24"]  # fmt: skip
    assert (
        main(
            [
                "train",
                "--preset",
                "tiny-cpu",
                "--steps",
                "1",
                "--progress",
                "plain",
                "--run-dir",
                str(run_dir),
                *tiny,
            ]
        )
        == 0
    )
    rows = read_metrics(run_dir)
    assert len(rows) == 1 and "loss/coder/optimizer_steps" in rows[0] and "time/coder_rollout" in rows[0]
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "samples" / "step_000001.jsonl").exists()
    assert (run_dir / "checkpoints" / "step_000001" / "coder").is_dir()
    assert (run_dir / "mistake_book.sqlite").exists()


def test_the_in_run_evaluation_memory_is_a_setting_checked_before_the_run_dir(tmp_path: Path) -> None:
    """Issue 45, item 15: under a hard ``ulimit -v`` below the evaluation sandbox's fixed 4096 MiB, a
    run with ``eval.data`` refused to start only after creating its run directory (which a retry
    then refused as not empty), and nothing could lower the limit. Now ``eval.memory_mb`` is checked
    before the directory exists, and lowering it runs."""
    import resource

    hard = 3600 << 20  # MiB: below the default eval.memory_mb, above what a scripted run needs

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))

    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    base = [sys.executable, "-m", "codea1", "train", *FAST, "--steps", "1", "--run-dir", str(run_dir),
            "--set", "eval.data=demo:easy", "--set", "eval.limit=2", "--set", "eval.n=1",
            "--set", "sandbox.workers=1"]  # fmt: skip
    refused = subprocess.run(base, env=env, preexec_fn=limited, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stderr[-2000:]
    errors = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert "eval.memory_mb" in errors[0] and "4096 MiB" in errors[0] and "ulimit -Hv" in errors[0]
    assert not run_dir.exists()  # nothing for a retry to refuse
    lower = [*base, "--set", "eval.memory_mb=2048"]
    done = subprocess.run(lower, env=env, preexec_fn=limited, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["eval"]["memory_mb"] == 2048
    assert (run_dir / "eval" / "step_000001").is_dir()


def test_eval_memory_mb_is_bounded() -> None:
    from codea1.config import ConfigError

    for bad in ("32", str(2 << 20)):
        with pytest.raises(ConfigError, match=r"eval.memory_mb must be in \[64, 1048576\] MiB"):
            load_config("tiny-cpu", ["eval.data=demo:easy", f"eval.memory_mb={bad}"])
