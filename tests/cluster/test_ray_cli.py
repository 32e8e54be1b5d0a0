"""``codea1 train`` on a Ray cluster end to end: the CLI in subprocesses, a tiny random Llama, a
local 2-CPU cluster started by each run.

* An a1 run (``separate``, 2 learner ranks per role, transformers replicas) loses one learner rank
  mid-run: one-line "an actor died" error, exit 2, the checkpoint before intact. It resumes on
  1 rank (``--set cluster.learner_workers=1``) and is SIGKILLed; every Ray process of the killed
  driver goes away. It resumes on the local backend and finishes: every step's metrics with their
  ``time/*`` phases, Ray checkpoints with full weights and sharded ``dcp/`` optimizer state, and
  ``codea1 eval code`` reads such a checkpoint.
* Self-play with LoRA adapters (vLLM replicas when vLLM imports) runs, and its adapter checkpoint
  evaluates.
* A layout the cluster cannot hold is a one-line error at once, not a wait.

Each Ray run spends most of its time starting actors (about a minute on 2 cores).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs the ray extra")
psutil = pytest.importorskip("psutil", reason="ray depends on psutil; the tests find its processes with it")

from codea1.cli import main  # noqa: E402
from codea1.tracking import read_metrics  # noqa: E402
from tests.tiny_model import make_tiny_model  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURE_PROBLEMS = REPO / "tests" / "fixtures" / "eval" / "problems.jsonl"
START_S = 300.0
"""Longest wait for a run to reach a point (actors start in about a minute on 2 loaded cores)."""
PHASES = ("time/step", "time/coder_rollout", "time/push_weights", "time/execution")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def settings(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


def new_run(tiny: Path, run_dir: Path, *pairs: str) -> list[str]:
    """``codea1 train`` arguments of a tiny run on a local 2-CPU cluster (``pairs`` added)."""
    base = settings(
        "engine.backend=ray", f"engine.coder_model={tiny}", "engine.rollout=transformers",
        "cluster.learner_workers=2", "cluster.cpus_per_worker=0.25", "cluster.num_cpus=2",
        "coder.sampling.max_new_tokens=32", "tester.sampling.max_new_tokens=32", "tracking.tensorboard=false",
    )  # fmt: skip
    return [
        "--preset",
        "tiny-cpu",
        "--progress",
        "plain",
        "--run-dir",
        str(run_dir),
        *base,
        *settings(*pairs),
    ]


class Train:
    """One ``codea1 train`` process; its output goes to files (a full pipe would stall it)."""

    def __init__(self, args: list[str], logs: Path, env: dict[str, str] | None = None) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        self.out, self.err = logs / "stdout", logs / "stderr"
        env = {**os.environ, **(env or {})}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "codea1", "train", *args], stdout=out, stderr=err, env=env, cwd=logs
            )

    def output(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def wait_for(self, path: Path) -> None:
        """Wait until ``path`` exists (a checkpoint directory appears whole: it is renamed)."""
        deadline = time.monotonic() + START_S
        while not path.exists():
            if self.proc.poll() is not None:
                pytest.fail(f"exited {self.proc.returncode} before {path.name}:\n{self.output()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"no {path.name} after {START_S:.0f} s:\n{self.output()}")
            time.sleep(0.2)

    def finish(self) -> int:
        try:
            return self.proc.wait(timeout=START_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"still running after {START_S:.0f} s:\n{self.output()}")

    def descendants(self) -> list[psutil.Process]:
        """This run's processes: Ray's (gcs_server, raylet, agents, actors) and the sandbox's."""
        return psutil.Process(self.proc.pid).children(recursive=True)


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def title(p: psutil.Process) -> str:
    try:
        return (p.cmdline() or [p.name()])[0]
    except psutil.Error:
        return "?"


def error_line(output: str) -> str:
    """The CLI's error: the one line starting with ``codea1: error:``, which must end the output."""
    errors = [line for line in output.splitlines() if line.startswith("codea1: error:")]
    assert len(errors) == 1 and output.rstrip().endswith(errors[0]), output
    assert "Traceback" not in output and "Unhandled error" not in output, output
    return errors[0]


def role_files(role_dir: Path) -> set[str]:
    return {p.relative_to(role_dir).as_posix() for p in role_dir.rglob("*") if p.is_file()}


def eval_code(model: Path, tmp_path: Path) -> None:
    """``codea1 eval code --model`` on one fixture problem, two short samples."""
    out = tmp_path / "eval.json"
    argv = [
        "eval", "code", "--model", str(model), "--data", str(FIXTURE_PROBLEMS), "--limit", "1", "--n", "2",
        "--max-new-tokens", "16", "--device", "cpu", "--workers", "1", "--output", str(out),
        "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"),
    ]  # fmt: skip
    assert main(argv) == 0
    metrics = json.loads(out.read_text())
    assert metrics["benchA"]["problems"] == 1
    rows = [json.loads(line) for line in Path(metrics["results"]).read_text().splitlines()]
    sampled = [r for r in rows if "id" in r]
    assert [(r["id"], len(r["completions"])) for r in sampled] == [("fx/clamp", 2)]


@pytest.mark.slow
def test_a1_run_outlives_a_dead_rank_a_killed_driver_and_a_change_of_backend(
    tiny: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"

    # 1. A learner rank dies during step 2: one line, exit 2, step 1's checkpoint intact.
    first = Train(new_run(tiny, run_dir, "train.steps=3"), tmp_path / "first")
    first.wait_for(checkpoints / "step_000001")
    ranks = [p for p in first.descendants() if title(p).startswith("ray::LearnerWorker")]
    assert len(ranks) == 4, [title(p) for p in first.descendants()]  # 2 roles x 2 ranks
    ranks[-1].kill()
    assert first.finish() == 2, first.output()
    line = error_line(first.output())
    assert line.startswith("codea1: error: training stopped: ") and "learner group: an actor died (" in line
    assert line.endswith(f"continue with codea1 train --resume {run_dir}")
    assert not (checkpoints / "step_000002").exists()
    assert [r["step"] for r in read_metrics(run_dir)] == [1]
    for role in ("coder", "tester"):  # written by 2 ranks: full weights, one optimizer shard per rank
        assert role_files(checkpoints / "step_000001" / role) == {
            "weights.safetensors", "scheduler.pt", "dcp/.metadata", "dcp/__0_0.distcp", "dcp/__1_0.distcp",
        }  # fmt: skip
    eval_code(checkpoints / "step_000001" / "coder", tmp_path / "eval")

    # 2. Resumed on 1 rank per role, SIGKILLed during step 3.
    second = Train(["--resume", str(run_dir), *settings("cluster.learner_workers=1")], tmp_path / "second")
    second.wait_for(checkpoints / "step_000002")
    ray_processes = second.descendants()
    assert any(title(p).startswith("ray::LearnerWorker") for p in ray_processes)
    second.proc.send_signal(signal.SIGKILL)
    second.proc.wait(timeout=30)
    killed_at = time.monotonic()
    assert role_files(checkpoints / "step_000002" / "coder") == {
        "weights.safetensors", "scheduler.pt", "dcp/.metadata", "dcp/__0_0.distcp",
    }  # fmt: skip

    # 3. Resumed on the local backend: finishes, every step's metrics there, local checkpoint format.
    third = Train(["--resume", str(run_dir), *settings("engine.backend=local")], tmp_path / "third")
    assert third.finish() == 0, third.output()
    assert "finished step 3/3" in third.output()
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert all(row[k] >= 0 for k in PHASES) and row["time/step"] > 0, row
    # on Ray (split placement) the two roles updated side by side; locally one after the other
    assert ["time/update" in r for r in rows] == [True, True, False]
    assert ["time/update_coder" in r for r in rows] == [False, False, True]
    assert role_files(checkpoints / "step_000003" / "coder") == {"weights.safetensors", "optimizer.pt"}

    # The killed driver's Ray processes fate-share with it: raylet, gcs_server and the actors within
    # seconds, Ray's agents once they give up reporting to the dead GCS (about a minute).
    deadline = killed_at + 150
    while alive(ray_processes) and time.monotonic() < deadline:
        time.sleep(1)
    left = alive(ray_processes)
    assert not left, f"left behind by the SIGKILLed driver: {[(p.pid, title(p)) for p in left]}"


@pytest.mark.slow
def test_selfplay_with_adapters_on_the_cluster(tiny: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = new_run(tiny, run_dir, "train.steps=2", "engine.mode=adapters", "engine.rollout=auto")
    # the run's own temporary directory, short (Ray's sockets live under it), to see what it leaves there
    scratch = Path(tempfile.mkdtemp(prefix="c1-", dir="/tmp"))
    try:
        run = Train([*args, "--method", "selfplay"], tmp_path / "logs", {"TMPDIR": str(scratch)})
        assert run.finish() == 0, run.output()  # vLLM replicas when vLLM imports
        # a replica's engine is shut down before its actor is killed: no vLLM rendezvous file is left
        assert not list(scratch.glob("vllm_dist_*")), sorted(p.name for p in scratch.iterdir())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rollout = "vllm" if "rollouts vllm" in run.output() else "transformers"
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r[f"rollout/engine/{rollout}"] == 1.0 for r in rows)
    step = run_dir / "checkpoints" / "step_000002"
    assert sorted(p.name for p in step.iterdir() if p.is_dir()) == ["coder"]  # one model plays both roles
    files = role_files(step / "coder")
    assert {"weights.safetensors", "dcp/__0_0.distcp", "dcp/__1_0.distcp"} <= files
    from safetensors import safe_open

    with safe_open(str(step / "coder" / "weights.safetensors"), "pt") as f:
        names = list(f.keys())
    assert names and all("lora_" in n for n in names)  # the adapter alone
    eval_code(step / "coder", tmp_path / "eval")


def test_a_layout_the_local_cluster_cannot_hold_is_one_line_at_once(tiny: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = new_run(tiny, run_dir, "cluster.learner_workers=64", "cluster.cpus_per_worker=1")
    start = time.monotonic()
    run = Train(args, tmp_path / "logs")
    assert run.finish() == 2, run.output()
    assert time.monotonic() - start < 90  # ray.init and the data, no placement wait
    line = error_line(run.output())
    assert line.startswith(
        "codea1: error: cannot build the engine: the cluster cannot place 130 actors needing 130 CPUs and "
        "0 GPUs (it has 2 CPUs, 0 GPUs); lower cluster.learner_workers"
    )
    assert "cluster.num_cpus" in line
    assert not run_dir.exists()
