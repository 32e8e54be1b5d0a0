"""The stages of ``scripts/gpu_check.sh`` on a lent GPU machine, one table of what passed.

The machine this is sized for: one H100 (about 78 GiB; an H200 the same) with torch, transformers,
peft, accelerate, safetensors,
pyarrow, matplotlib, tensorboard, rich, numpy, pyyaml, tokenizers, coverage, pytest, setuptools and
psutil (:data:`MACHINE_PACKAGES`), **no vLLM, no Ray, no gguf, no internet**, and at most 64 MiB of
carried files. What it lacks comes in ``.gpu_carry/`` (git-ignored), written here on a CPU by
``--prepare``: SmolLM2's tokenizer files (``tokenizer/``, 3.5 MB) and the pure-Python ``gguf`` wheel
(``wheels/``, 120 KB); the demo model's GGUF (94 MiB) is over the limit, so the train stage builds
a random-init model of its shape. ``--prepare`` prints the folder's size and fails above 64 MiB.
The stages, in the order they run (:func:`stages`):

* ``env`` (info): the GPU, torch/transformers/peft versions, which of vllm, ray and gguf import.
* ``install``: ``pip install --no-deps --no-build-isolation --no-index --target $WORK/site`` of the
  carried wheels and a copy of this repository; PASS when the installed ``codea1`` (not the
  repository's) and ``gguf`` import from ``$WORK/site`` with the presets packaged. Later stages run
  the installed copy; if the install fails they fall back to the repository on ``PYTHONPATH``.
* ``sandbox``: ``codea1 sandbox doctor`` (its output is in the log) and ``codea1 sandbox selftest``
  (the exploit suite: a random-init model writes no code that runs, so this is what runs programs
  in the sandbox here). A sandbox that cannot start is a FAIL with its one-line reason, and the
  train stage then fails saying so, within its time limit.
* ``train``: ``benchmarks/gpu_train.py``, ``codea1 train --preset paper-1.5b`` for 2 steps on a
  random-init SmolLM2-135M-shaped Qwen2 with the transformers engine on CUDA, and each step's
  ``memory/peak_gpu_gib`` against the memory plan.
* ``train-vllm`` (needs vllm), ``train-ray`` (needs ray and vllm): the same run with vLLM rollouts,
  and on the Ray backend (one learner rank and one replica per role on the one GPU). For a full GPU
  box: SKIP, with the reason, where the package does not import.
* ``engine``: ``benchmarks/gpu_check.py`` (its docstring says what each check means), with the time
  left (``--budget-s`` less 40 s): its rows join the table.

**Two device calls** (:data:`CALLS`; the lent machine gives 15 minutes in all, 5 a call leaves time
to rerun one): ``--call 1`` runs env, install, sandbox and the train stages, ``--call 2`` env and the
engine checks, each within :data:`CALL_BUDGET_S` (270 s; the shell script sends SIGTERM at 285 s,
which writes the table and the logs, and SIGKILL 10 s later, within the call's 300 s).

Every stage is a subprocess with a time limit, and no stage starts after ``--budget-s`` (450 s for
every stage at once; the shell script stops that at 480). The table (``| check | verdict | value |
how | s |``) is printed to stdout once, at the end; progress and each stage's output go to stderr,
and with ``--out`` (default ``$OUT``) three files (:data:`OUT_FILES`, of the 8 a call brings back)
are rewritten after each stage: ``gpu_check.json`` (every row and number), ``gpu_check.md`` (the
table) and ``gpu_check-logs.tar.gz`` (every command's log, ``logs/NAME.log``). Exit status 1 when a
row says FAIL, 124 when stopped by SIGTERM, 2 on bad input.

``--dry-run`` prints the device calls to make (command, carry list, ``timeout_s``, each against the
tool's limits, and the size of what each call sends), the stages, their commands and the carried
files, and runs nothing (no torch import). ``--device cpu --tiny`` runs the same stages on a CPU with a tiny model (the train stage in
about two minutes on 2 cores). ``--block vllm,ray`` makes those packages unimportable in every
stage's process (a ``sitecustomize`` on ``PYTHONPATH``), to play the bare machine on a full one.

Only the standard library is imported here: the stages import the rest in their own processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_train  # noqa: E402  (benchmarks/, this script's directory)

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / ".gpu_carry"
BUDGET_S = 450.0
"""The budget of a run of every stage at once (a machine with time for it)."""
CALLS = {
    1: (
        "install, sandbox, 2-step codea1 train on CUDA",
        ("env", "install", "sandbox", "train", "train-vllm", "train-ray"),
    ),
    2: ("the engine and memory checks", ("env", "engine")),
}
"""The two device calls of the lent machine (``--call N``): each stage list and what it proves."""
CALL_BUDGET_S = 270.0
"""A call's budget: no stage starts after it, the engine checks end by it."""
CALL_STOP_S = 285
"""``scripts/gpu_check.sh --call N`` stops everything after this many seconds (SIGTERM: the table
and the logs are written), SIGKILL 10 s later: within :data:`CALL_TIMEOUT_S`."""
CALL_TIMEOUT_S = 300
"""The device call's ``timeout_s``: 5 minutes, two calls and a rerun of one within 15 minutes."""
CARRY_PATH = ".gpu_carry"
"""The ``carry`` path of a device call (relative to the repository)."""
MAX_CARRY_MIB = 64.0
"""What a device call may carry, with the working tree (the tool's limit)."""
MAX_OUT_FILES = 8
"""Files a device call may bring back from ``$OUT``."""
MAX_COMMAND_CHARS = 2000
"""The longest command a device call takes."""
OUT_FILES = ("gpu_check.json", "gpu_check.md", "gpu_check-logs.tar.gz")
"""What a run writes under ``--out``: every row and number, the table, every command's log."""
DEMO_WEIGHTS_MIB = 93.8
"""The demo model's GGUF (SmolLM2-135M-Instruct.Q4_1.gguf): over :data:`MAX_CARRY_MIB`, so not
carried; the train stage builds a random-init model of its shape."""
ENGINE_MARGIN_S = 40.0
"""The engine checks get ``--budget-s`` this much below the time left (their last check's length)."""
MACHINE_PACKAGES = (
    "torch", "transformers", "peft", "accelerate", "safetensors", "pyarrow", "matplotlib", "tensorboard",
    "rich", "numpy", "yaml", "tokenizers", "coverage", "pytest", "setuptools", "psutil",
)  # fmt: skip
"""Import names of what the lent GPU machine has (and their own dependencies: huggingface_hub,
tqdm, packaging, jinja2, ...); vllm, ray and gguf it has not."""
CARRIED_PACKAGES = ("gguf",)
"""Import names of the wheels carried in ``.gpu_carry/wheels/``."""
GGUF_VERSION = "0.19.0"
"""The carried ``gguf`` (pure Python; ``pyproject.toml`` asks for >= 0.10)."""
SOURCE_FILES = ("pyproject.toml", "README.md", "codea1")
"""What the install copies from the repository (a build writes ``build/`` and ``*.egg-info`` there)."""


Row = gpu_train.Row
"""One line of the table (the train stage writes its rows in this form)."""


@dataclass
class Context:
    """One run of the stages: options, directories, the clock, what imports."""

    python: str
    device: str
    tiny: bool
    checks: str
    budget_s: float
    work: Path
    out: Path | None
    carry: Path
    block: tuple[str, ...] = ()
    started: float = field(default_factory=time.perf_counter)
    installed: bool = False
    imports: dict[str, str] = field(default_factory=dict)
    """Package → "" when it imports, else why not (the ``env`` stage fills it)."""

    @property
    def site(self) -> Path:
        """Where the install puts codea1 and the carried wheels."""
        return self.work / "site"

    @property
    def cuda(self) -> bool:
        """Whether the stages run on a GPU."""
        return self.device.startswith("cuda")

    def left(self) -> float:
        """Seconds left of the budget."""
        return self.budget_s - (time.perf_counter() - self.started)

    @property
    def logs(self) -> Path:
        """Where each command's output goes, ``$WORK/logs`` (bundled into ``--out`` by :func:`save`)."""
        return self.work / "logs"

    def env(self, path: str) -> dict[str, str]:
        """The environment of a stage's process, offline, the blocker first on ``PYTHONPATH``, then
        by ``path``: ``installed``, the installed copy (the repository and the carried wheels
        until the install has passed); ``repo``, the repository; ``bare``, nothing of ours."""
        paths = [str(self.work / "block")] if self.block else []
        if path == "installed" and self.installed:
            paths.append(str(self.site))
        elif path != "bare":
            paths.append(str(ROOT))
            if path == "installed":
                paths += map(str, wheels(self.carry))  # a pure wheel imports from its zip
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env.pop("OUT", None)
        return env


@dataclass(frozen=True)
class Stage:
    """A stage: its key, what it needs to import, its time limit, what it runs (for ``--dry-run``)
    and how."""

    key: str
    needs: tuple[str, ...]
    limit_s: float
    commands: Callable[[Context], list[list[str]]]
    run: Callable[[Context], list[Row]]


# ---- running commands ----------------------------------------------------------------------------


def run_command(ctx: Context, name: str, command: Sequence[str], limit_s: float, *, path: str = "installed",
                cwd: Path | None = None) -> tuple[int, str]:  # fmt: skip
    """Run ``command`` within ``limit_s`` (and the budget) with :meth:`Context.env` ``path``, its
    output written as it comes to ``$WORK/logs/NAME.log`` (bundled into ``--out`` after each stage,
    and when the run is stopped from outside) and its last lines to stderr; ``(exit status,
    output)``, 124 when it was stopped by the time limit."""
    limit = max(1.0, min(limit_s, ctx.left()))
    log = ctx.logs / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"gpu_check: {name}: {shlex.join(command)}", file=sys.stderr, flush=True)
    with open(log, "w", encoding="utf-8") as sink:
        sink.write(f"$ {shlex.join(command)}\n")
        sink.flush()
        try:
            proc = subprocess.Popen(
                list(command), cwd=cwd or ctx.work, env=ctx.env(path), stdout=sink, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        except OSError as e:
            sink.write(f"{type(e).__name__}: {e}\n")
            return 127, f"{type(e).__name__}: {e}"
        try:
            status = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            stop(proc)
            status = 124
        except BaseException:  # stopped from outside (SIGTERM): end the command, then report
            stop(proc)
            raise
    output = log.read_text(encoding="utf-8", errors="replace").split("\n", 1)[-1]
    if status == 124:
        output += f"\n(stopped after {limit:.0f} s)\n"
    with open(log, "a", encoding="utf-8") as sink:
        sink.write(f"\n(exit status {status})\n")
    sys.stderr.write("".join(f"  {name}| {line}\n" for line in output.splitlines()[-30:]))
    return status, output


def stop(proc: subprocess.Popen) -> None:
    """End ``proc`` and everything it started (its own session): SIGTERM, SIGKILL 10 s later."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (one line for a table cell)."""
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")[:300]


def wheels(carry: Path) -> list[Path]:
    """The carried wheels."""
    return sorted((carry / "wheels").glob("*.whl"))


# ---- env -----------------------------------------------------------------------------------------

VERSIONS = (
    "import torch, transformers, peft; cuda = torch.cuda.is_available(); "
    "print(f'torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
    "peft {peft.__version__}, python ' + __import__('platform').python_version() + ', ' + "
    "(torch.cuda.get_device_name(0) + f', {torch.cuda.get_device_properties(0).total_memory / 2**30:.1f} GiB' "
    "if cuda else 'no CUDA device'))"
)
PROBE = "import importlib, sys; importlib.import_module(sys.argv[1]); print('imports')"


def env_commands(ctx: Context) -> list[list[str]]:
    """``nvidia-smi``, the versions, one import probe per optional package."""
    probes = [[ctx.python, "-c", PROBE, name] for name in ("vllm", "ray", "gguf")]
    return [["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            [ctx.python, "-c", VERSIONS], *probes]  # fmt: skip


def env_stage(ctx: Context) -> list[Row]:
    """The machine (info) and which optional packages import (before the install)."""
    smi = ""
    if shutil.which("nvidia-smi"):
        status, out = run_command(ctx, "env-nvidia-smi", env_commands(ctx)[0], 30, path="bare")
        smi = f"; nvidia-smi: {last_line(out)}" if status == 0 else ""
    status, out = run_command(ctx, "env-versions", [ctx.python, "-c", VERSIONS], 120, path="bare")
    rows = [Row("machine", "info" if status == 0 else "FAIL", last_line(out) + smi, f"{ctx.python} -c ...")]
    for name in ("vllm", "ray", "gguf"):
        status, out = run_command(
            ctx, f"env-import-{name}", [ctx.python, "-c", PROBE, name], 180, path="bare"
        )
        ctx.imports[name] = (
            ""
            if status == 0 and "imports" in out
            else (last_line(out) if status != 124 else "import timed out")
        )
    said = ", ".join(f"{n}: {'imports' if not why else 'no'}" for n, why in ctx.imports.items())
    rows.append(Row("optional packages", "info", said, "import probe of each, before the install"))
    return rows


# ---- install -------------------------------------------------------------------------------------


def install_commands(ctx: Context) -> list[list[str]]:
    """pip with ``--no-deps --no-build-isolation``, then an import check of the installed copy."""
    pip = [ctx.python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
           "--disable-pip-version-check", "--target", str(ctx.site)]  # fmt: skip
    check = [ctx.python, "-c", INSTALLED]
    return [[*pip, *map(str, wheels(ctx.carry)), str(ctx.work / "src")], check]


INSTALLED = (
    "import codea1, gguf, importlib.metadata as m; from codea1.config import preset_names; "
    'print(f\'codea1 {m.version("codea1")} from {codea1.__file__}, gguf {m.version("gguf")} from {gguf.__file__}, \''
    "f'presets: {len(preset_names())}')"
)


def install_stage(ctx: Context) -> list[Row]:
    """Install the carried wheels and codea1 with ``--no-deps`` into ``$WORK/site``; check that the
    installed copy is what imports."""
    src = ctx.work / "src"
    for name in SOURCE_FILES:
        source = ROOT / name
        target = src / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    pip, check = install_commands(ctx)
    how = "pip install --no-deps --no-build-isolation --no-index --target $WORK/site (carried wheels, codea1)"
    if not wheels(ctx.carry):
        how += f"; no carried wheel in {ctx.carry}/wheels (scripts/gpu_check.sh --prepare)"
    status, out = run_command(ctx, "install-pip", pip, 180, path="bare")
    if status != 0:
        return [
            Row(
                "install codea1 --no-deps",
                "FAIL",
                f"pip: {last_line(out)}; the repository is used instead",
                how,
            )
        ]
    ctx.installed = True
    status, out = run_command(ctx, "install-check", check, 60)
    site = str(ctx.site)
    if status != 0 or f"from {site}/codea1" not in out:  # gguf may come from elsewhere where installed
        ctx.installed = False
        return [
            Row("install codea1 --no-deps", "FAIL", f"installed copy not imported: {last_line(out)}", how)
        ]
    value = last_line(out).replace(site, "$WORK/site")
    script = ctx.site / "bin" / "codea1"
    value += f"; console script {'$WORK/site/bin/codea1' if script.exists() else 'missing'}"
    return [Row("install codea1 --no-deps", "PASS" if script.exists() else "FAIL", value, how)]


# ---- sandbox -------------------------------------------------------------------------------------


def sandbox_commands(ctx: Context) -> list[list[str]]:
    """``codea1 sandbox doctor`` and ``selftest`` of the installed copy."""
    return [
        [ctx.python, "-m", "codea1", "sandbox", "doctor"],
        [ctx.python, "-m", "codea1", "sandbox", "selftest"],
    ]


def sandbox_stage(ctx: Context) -> list[Row]:
    """The isolation layers this machine gives, and the exploit suite in them."""
    doctor, selftest = sandbox_commands(ctx)
    status, out = run_command(ctx, "sandbox-doctor", doctor, 60)
    missing = [ln.split()[0] for ln in out.splitlines() if "unavailable" in ln and ln.split()]
    if status == 0:
        value = (
            "all layers active" if "all layers active" in out else f"layers unavailable: {', '.join(missing)}"
        )
        rows = [Row("sandbox doctor", "PASS", value, "python -m codea1 sandbox doctor (output in logs/)")]
    else:
        why = "stopped after 60 s" if status == 124 else last_line(out)
        rows = [
            Row("sandbox doctor", "FAIL", f"exit status {status}: {why}", "python -m codea1 sandbox doctor")
        ]
    status, out = run_command(ctx, "sandbox-selftest", selftest, 120)
    why = "stopped after 120 s" if status == 124 else last_line(out)
    rows.append(Row("sandbox selftest", "PASS" if status == 0 else "FAIL", why if status == 0 else f"exit status {status}: {why}",
                    "python -m codea1 sandbox selftest (the exploit suite)"))  # fmt: skip
    return rows


# ---- train ---------------------------------------------------------------------------------------


def train_args(ctx: Context, key: str) -> list[str]:
    """``benchmarks/gpu_train.py``'s command for stage ``key``."""
    variant = {
        "train": [],
        "train-vllm": ["--rollout", "vllm"],
        "train-ray": ["--rollout", "vllm", "--backend", "ray"],
    }
    return [
        ctx.python, str(ROOT / "benchmarks" / "gpu_train.py"), "--tokenizer", str(ctx.carry / "tokenizer"),
        "--work", str(ctx.work / key), "--device", ctx.device, *(["--tiny"] if ctx.tiny else []),
        "--timeout-s", str(int(max(30.0, min(train_limit(ctx), ctx.left()) - 30))),
        "--result", str(ctx.work / f"{key}.json"), *variant[key],
    ]  # fmt: skip


def train_limit(ctx: Context) -> float:
    """The train stage's time limit: model build, ``codea1 train`` (its own limit is 30 s less), plan."""
    return 240.0 if ctx.cuda or not ctx.tiny else 300.0


def train_commands(key: str) -> Callable[[Context], list[list[str]]]:
    """The stage's command, and the ``codea1 train`` it runs."""

    def commands(ctx: Context) -> list[list[str]]:
        rollout = "vllm" if key != "train" else "transformers"
        backend = "ray" if key == "train-ray" else "local"
        inner = gpu_train.train_command(
            ctx.python, str(ctx.work / key / "model"), str(ctx.work / key / "run"), ctx.device, tiny=ctx.tiny,
            rollout=rollout, backend=backend,
        )  # fmt: skip
        return [train_args(ctx, key), inner]

    return commands


def train_stage(key: str) -> Callable[[Context], list[Row]]:
    """Run ``benchmarks/gpu_train.py`` and take its rows."""

    def run(ctx: Context) -> list[Row]:
        command = train_args(ctx, key)
        status, out = run_command(ctx, key, command, train_limit(ctx))
        result = ctx.work / f"{key}.json"
        if not result.exists():
            why = "stopped by the time limit" if status == 124 else last_line(out)
            return [Row(key, "FAIL", f"no result: {why}", "benchmarks/gpu_train.py")]
        return [Row(**r) for r in json.loads(result.read_text(encoding="utf-8"))]

    return run


# ---- engine checks -------------------------------------------------------------------------------


def engine_commands(ctx: Context) -> list[list[str]]:
    """``benchmarks/gpu_check.py`` with the time left."""
    budget = max(0.0, ctx.left() - ENGINE_MARGIN_S)
    command = [ctx.python, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", ctx.device,
               "--budget-s", f"{budget:.0f}", "--out", str(ctx.work / "engine")]  # fmt: skip
    return [command + (["--tiny"] if ctx.tiny else []) + (["--only", ctx.checks] if ctx.checks else [])]


def engine_stage(ctx: Context) -> list[Row]:
    """The one-GPU engine checks; their rows (and detail rows) from their JSON."""
    (command,) = engine_commands(ctx)
    status, out = run_command(ctx, "engine", command, ctx.left() - 5, path="repo", cwd=ROOT)
    path = ctx.work / "engine" / "gpu_check.json"
    if not path.exists():
        return [
            Row(
                "engine checks (benchmarks/gpu_check.py)",
                "FAIL",
                f"no result: {last_line(out)}",
                shlex.join(command[1:]),
            )
        ]
    result = json.loads(path.read_text(encoding="utf-8"))
    rows = []
    for check in result.get("checks", {}).values():
        rows.append(
            Row(
                check["title"],
                check["verdict"],
                check["value"],
                check["how"],
                check["seconds"],
                check.get("data", {}),
            )
        )
        rows += [
            Row(**{k: d[k] for k in ("name", "verdict", "value", "how", "seconds")})
            for d in check.get("details", [])
        ]
    if "seconds" not in result:  # stopped before its end
        rows.append(Row("engine checks (benchmarks/gpu_check.py)", "FAIL", f"stopped (exit status {status}) after "
                        f"{len(result.get('checks', {}))} checks: {last_line(out)}", shlex.join(command[1:])))  # fmt: skip
    elif status not in (0, 1):
        rows.append(
            Row(
                "engine checks (benchmarks/gpu_check.py)",
                "FAIL",
                f"exit status {status}",
                shlex.join(command[1:]),
            )
        )
    return rows


# ---- the stages ----------------------------------------------------------------------------------


def stages() -> tuple[Stage, ...]:
    """Every stage, in the order they run."""
    return (
        Stage("env", (), 0, env_commands, env_stage),
        Stage("install", (), 240, install_commands, install_stage),
        Stage("sandbox", (), 180, sandbox_commands, sandbox_stage),
        Stage("train", (), 240, train_commands("train"), train_stage("train")),
        Stage("train-vllm", ("vllm",), 240, train_commands("train-vllm"), train_stage("train-vllm")),
        Stage("train-ray", ("ray", "vllm"), 240, train_commands("train-ray"), train_stage("train-ray")),
        Stage("engine", (), 0, engine_commands, engine_stage),
    )


def carried(carry: Path) -> list[tuple[Path, int]]:
    """Every carried file and its size."""
    return sorted((p, p.stat().st_size) for p in carry.rglob("*") if p.is_file()) if carry.is_dir() else []


def device_calls() -> list[tuple[int, str, str, list[str], int]]:
    """The device calls to make, in order: ``(N, what it proves, command, carry, timeout_s)``."""
    return [(n, what, f"bash scripts/gpu_check.sh --call {n}", [CARRY_PATH], CALL_TIMEOUT_S)
            for n, (what, _) in CALLS.items()]  # fmt: skip


def travelling_mib(carry: Path) -> float | None:
    """MiB of what a device call sends: the tracked and untracked, not ignored, files of the
    repository (``git ls-files``) and the carried folder; None without git."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
            capture_output=True, timeout=60, check=True,
        ).stdout.decode(errors="replace")  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    files = [ROOT / name for name in listed.split("\0") if name]
    tree = sum(f.stat().st_size for f in files if f.is_file())
    return (tree + sum(size for _, size in carried(carry))) / 2**20


def print_device_calls(carry: Path) -> None:
    """The device calls, each with its command, carry list and timeout, checked against the limits."""
    print(f"device calls (kind left out: an H100 of about 78 GiB first; {len(CALLS)} calls of at most "
          f"{CALL_TIMEOUT_S} s, each stopping itself at {CALL_STOP_S} s; at most {MAX_OUT_FILES} files back, "
          f"this writes {len(OUT_FILES)}: {', '.join(OUT_FILES)}):")  # fmt: skip
    for n, what, command, paths, timeout in device_calls():
        print(f"  call {n} ({what}):")
        print(f"    command: {command}")
        print(f"    carry: {json.dumps(paths)}")
        print(f"    timeout_s: {timeout}")
        print(f"    limits: command {len(command)} of {MAX_COMMAND_CHARS} chars, carry {len(paths)} of 8 paths, "
              f"stages {', '.join(CALLS[n][1])} within {CALL_BUDGET_S:.0f} s")  # fmt: skip
    size = travelling_mib(carry)
    said = "unknown (no git)" if size is None else f"{size:.1f} MiB"
    over = size is not None and size > MAX_CARRY_MIB
    print(
        f"  sent with each call (working tree + carry): {said} of {MAX_CARRY_MIB:g}{' -- OVER' if over else ''}"
    )
    print("  call 1 failed: fix, then rerun call 1 alone; call 2 does not need call 1's results.\n")


def dry_run(ctx: Context, keys: Sequence[str]) -> int:
    """Print what a run would do; run nothing."""
    print("scripts/gpu_check.sh --dry-run: nothing is run. $WORK is a new temporary directory.\n")
    print_device_calls(ctx.carry)
    for stage in stages():
        if stage.key not in keys:
            continue
        needs = f" (needs {', '.join(stage.needs)}; SKIP where it does not import)" if stage.needs else ""
        limit = f", stopped after {stage.limit_s:.0f} s" if stage.limit_s else ""
        print(f"stage {stage.key}{needs}{limit}:")
        for command in stage.commands(ctx):
            print("  " + shlex.join(command).replace(str(ctx.work), "$WORK").replace(str(ROOT) + "/", ""))
    files = carried(ctx.carry)
    total = sum(size for _, size in files)
    print(f"\ncarried ({ctx.carry.relative_to(ROOT) if ctx.carry.is_relative_to(ROOT) else ctx.carry}, "
          f"git-ignored; run's carry path: .gpu_carry), {len(files)} files, {total / 2**20:.1f} MiB:")  # fmt: skip
    for path, size in files:
        print(f"  {path.relative_to(ctx.carry)}  {size / 2**20:.2f} MiB")
    missing = [n for n, ok in (("tokenizer/tokenizer.json", (ctx.carry / "tokenizer" / "tokenizer.json").exists()),
                               ("wheels/gguf-*.whl", bool(wheels(ctx.carry)))) if not ok]  # fmt: skip
    if missing:
        print(
            f"  missing: {', '.join(missing)} (run scripts/gpu_check.sh --prepare on a machine with the demo model)"
        )
    return 0


def prepare(carry: Path, python: str) -> int:
    """Write the carried files: the SmolLM2 tokenizer (from the demo model's GGUF) and the gguf wheel."""
    sys.path.insert(0, str(ROOT))
    from transformers import AutoTokenizer

    from codea1.engine.loading import SMOLLM2_SPEC, default_cache_dir, dequantize_gguf_to_cache, resolve_model

    smollm2 = dequantize_gguf_to_cache(Path(resolve_model(SMOLLM2_SPEC).location), default_cache_dir())
    tokenizer = carry / "tokenizer"
    AutoTokenizer.from_pretrained(str(smollm2)).save_pretrained(str(tokenizer))
    if not list((carry / "wheels").glob(f"gguf-{GGUF_VERSION}-*.whl")):
        download = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                    "--implementation", "cp", "--platform", "manylinux_2_17_x86_64", "-d", str(carry / "wheels"),
                    f"gguf=={GGUF_VERSION}"]  # fmt: skip
        if subprocess.run(download).returncode != 0:
            print("gpu_check --prepare: pip download of gguf failed", file=sys.stderr)
            return 1
    files = carried(carry)
    for path, size in files:
        print(f"{path.relative_to(carry.parent)}  {size / 2**20:.2f} MiB")
    total = sum(s for _, s in files) / 2**20
    print(f"{len(files)} files, {total:.1f} MiB in {carry} (a device call carries at most {MAX_CARRY_MIB:g} MiB "
          f"with the working tree); not carried: the demo model's weights (its GGUF, {DEMO_WEIGHTS_MIB} MiB): "
          "the train stage builds a random-init model of its shape")  # fmt: skip
    if total > MAX_CARRY_MIB:
        print(f"gpu_check --prepare: {carry} holds {total:.1f} MiB, over {MAX_CARRY_MIB:g}", file=sys.stderr)
        return 1
    return 0


def write_block(directory: Path, names: Sequence[str]) -> Path:
    """A ``sitecustomize.py`` in ``directory`` that makes the packages ``names`` unimportable in a
    process with ``directory`` first on ``PYTHONPATH``; the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n\n\n"
        "class _Blocked(importlib.abc.MetaPathFinder):\n"
        f"    names = {sorted(set(names))!r}\n\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in self.names:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (blocked by gpu_check --block)', name=name)\n"
        "        return None\n\n\n"
        "sys.meta_path.insert(0, _Blocked())\n",
        encoding="utf-8",
    )
    return directory


def cell(text: str) -> str:
    """Text safe for a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rows: Sequence[Row]) -> str:
    """The markdown table."""
    lines = ["| check | verdict | value | how | s |", "|---|---|---|---|--:|"]
    for r in rows:
        seconds = "" if r.seconds is None else f"{r.seconds:.1f}"
        lines.append(f"| {cell(r.name)} | {r.verdict} | {cell(r.value)} | {cell(r.how)} | {seconds} |")
    return "\n".join(lines)


def plain(value: Any) -> Any:
    """``value`` with NaN and infinities as None (strict JSON)."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def save(ctx: Context, rows: Sequence[Row], done: bool) -> None:
    """:data:`OUT_FILES` under ``--out``: ``gpu_check.json``, ``gpu_check.md`` and every command's log
    so far in ``gpu_check-logs.tar.gz`` (the device brings back at most :data:`MAX_OUT_FILES` files)."""
    if ctx.out is None:
        return
    ctx.out.mkdir(parents=True, exist_ok=True)
    bundle_logs(ctx.logs, ctx.out / OUT_FILES[2])
    result = {"device": ctx.device, "tiny": ctx.tiny, "finished": done, "seconds": time.perf_counter() - ctx.started,
              "verdict": "FAIL" if any(r.verdict == "FAIL" for r in rows) else "PASS", "rows": [asdict(r) for r in rows]}  # fmt: skip
    engine = ctx.work / "engine" / "gpu_check.json"
    if engine.exists():
        result["engine_checks"] = json.loads(engine.read_text(encoding="utf-8"))
    text = json.dumps(plain(result), indent=1, default=str, allow_nan=False)
    (ctx.out / "gpu_check.json").write_text(text + "\n", encoding="utf-8")
    (ctx.out / "gpu_check.md").write_text(table(rows) + "\n", encoding="utf-8")


def bundle_logs(logs: Path, bundle: Path) -> None:
    """Every ``*.log`` under ``logs`` in one gzipped tar ``bundle`` (``logs/NAME.log`` inside),
    written beside it first and then renamed, so a reader never sees half of one."""
    import tarfile

    partial = bundle.with_name(bundle.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for log in sorted(logs.glob("*.log")) if logs.is_dir() else []:
            tar.add(log, arcname=f"logs/{log.name}")
    partial.replace(bundle)


class Stopped(Exception):
    """The run was told to stop (SIGTERM: the shell script's time limit)."""


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise Stopped()


def run_stages(ctx: Context, keys: Sequence[str]) -> int:
    """Run the chosen stages in order; print the table; 1 if a row says FAIL, 124 when stopped from
    outside (SIGTERM), after writing what it has."""
    import signal

    rows: list[Row] = []
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        run_each(ctx, keys, rows)
    except Stopped:
        rows.append(Row("stopped", "FAIL", f"SIGTERM after {time.perf_counter() - ctx.started:.0f} s (the "
                        "script's time limit); the stage that ran has its log in the bundle", "timeout"))  # fmt: skip
        save(ctx, rows, done=False)
        print(table(rows), flush=True)
        return 124
    total = time.perf_counter() - ctx.started
    failed = any(r.verdict == "FAIL" for r in rows)
    rows.append(
        Row("total", "FAIL" if failed else "PASS", f"{total:.1f} s", f"stages: {', '.join(keys)}", total)
    )
    save(ctx, rows, done=True)
    print(table(rows), flush=True)
    return 1 if failed else 0


def run_each(ctx: Context, keys: Sequence[str], rows: list[Row]) -> None:
    """Run the chosen stages in order, each one's rows appended to ``rows`` and saved as it ends."""
    for stage in stages():
        if stage.key not in keys:
            continue
        start = time.perf_counter()
        absent = [n for n in stage.needs if ctx.imports.get(n, "") or n in ctx.block]
        if stage.needs and "env" not in keys and not absent:
            absent = [
                n
                for n in stage.needs
                if run_command(ctx, f"{stage.key}-probe", [ctx.python, "-c", PROBE, n], 180)[0]
            ]
        if absent:
            why = "; ".join(f"{n}: {ctx.imports.get(n) or 'blocked'}" for n in absent)
            how = (
                shlex.join(stage.commands(ctx)[0][1:])
                .replace(str(ctx.work), "$WORK")
                .replace(str(ROOT) + "/", "")
            )
            new = [Row(stage.key, "SKIP", f"needs {', '.join(stage.needs)} (for a full GPU box); {why}", how)]
        elif ctx.left() <= (0 if stage.key == "engine" else 30):
            new = [
                Row(stage.key, "FAIL", "not run: the time budget was spent", f"--budget-s {ctx.budget_s:g}")
            ]
        else:
            try:
                new = stage.run(ctx)
            except Exception as e:  # a stage's own bug: one line, the others still run
                new = [Row(stage.key, "FAIL", f"{type(e).__name__}: {e}"[:300], "the stage raised")]
        for r in new:
            r.seconds = time.perf_counter() - start if r.seconds is None else r.seconds
            print(f"gpu_check: {r.name}: {r.verdict}: {r.value[:200]}", file=sys.stderr, flush=True)
        rows += new
        save(ctx, rows, done=False)


def main(argv: list[str] | None = None) -> int:
    """Parse the options; prepare, dry-run or run."""
    keys = [s.key for s in stages()]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda or cpu (default cuda)")
    ap.add_argument("--tiny", action="store_true", help="tiny models (a CPU, or a smoke run)")
    ap.add_argument(
        "--stages", default=",".join(keys), help=f"comma-separated, of {', '.join(keys)} (default all)"
    )
    ap.add_argument("--only", default="", help="engine checks to run (benchmarks/gpu_check.py --only)")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help="start no stage after this many seconds")
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="directory for gpu_check.json ($OUT)")
    ap.add_argument("--carry", default=str(CARRY), help="the carried files (default .gpu_carry)")
    ap.add_argument("--block", default="", help="packages to make unimportable, e.g. vllm,ray")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="print the device calls, the stages' commands and the carried files",
    )
    ap.add_argument("--call", type=int, default=0, choices=sorted(CALLS),
                    help="one device call's stages within its budget (1: install, sandbox, train; 2: engine checks)")  # fmt: skip
    ap.add_argument("--prepare", action="store_true", help="write the carried files (run on a CPU machine)")
    args = ap.parse_args(argv)
    chosen = [k.strip() for k in args.stages.split(",") if k.strip()]
    if args.call:
        chosen = list(CALLS[args.call][1])
        args.budget_s = min(args.budget_s, CALL_BUDGET_S)
    unknown = sorted(set(chosen) - set(keys))
    if unknown:
        print(f"gpu_check: --stages takes {', '.join(keys)}; unknown: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.device not in ("cuda", "cpu") and not args.device.startswith("cuda:"):
        print(f"gpu_check: --device must be cuda, cuda:N or cpu, got {args.device!r}", file=sys.stderr)
        return 2
    carry = Path(args.carry).resolve()
    if args.prepare:
        return prepare(carry, sys.executable)
    block = tuple(n.strip() for n in args.block.split(",") if n.strip())
    with contextlib.ExitStack() as stack:
        work = (
            Path("/nonexistent/WORK")
            if args.dry_run
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu_check-")))
        )
        out = Path(args.out).resolve() if args.out else None
        ctx = Context(
            sys.executable, args.device, args.tiny, args.only, args.budget_s, work, out, carry, block
        )
        if args.dry_run:
            return dry_run(ctx, chosen)
        if block:
            write_block(ctx.work / "block", block)
        return run_stages(ctx, chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
