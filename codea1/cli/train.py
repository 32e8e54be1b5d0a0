"""``codea1 train``: build the configuration, build the engine (``codea1.engine.build``), open the
sandbox, run the trainer.

``--engine scripted`` runs the whole loop on the scripted fake engine (``engine.scripted_roles``),
a CPU dry run of seconds.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codea1.cli import CliError, os_error_line
from codea1.cli.malloc_relaunch import malloc_in_use
from codea1.cli.options import check_workers
from codea1.cli.resume import RESUME_CONFIG, finished_step, resume_config
from codea1.cli.train_summary import what_changed
from codea1.config import RunConfig, load_config, with_values
from codea1.limits import MAX_WORKERS
from codea1.run_lock import LOCK_FILE, RunDirBusy, RunDirLock

DEFAULT_PRESET = "demo-cpu"
"""What ``codea1 train`` runs with no ``--preset``: the laptop demo (README)."""
MEMORY_WARNING_SHARE = 0.9
"""A run whose expected host memory passes this share of the machine's memory is warned about."""

if TYPE_CHECKING:  # the engine's seam imports torch: the cli loads it only when it trains
    from codea1.engine.base import Roles


def register(subparsers: Any) -> None:
    """Add the ``train`` subcommand."""
    p = subparsers.add_parser("train", help="train the Code LLM and the Test LLM (Code-A1 or a baseline)")
    p.add_argument(
        "--preset",
        default=None,
        help=f"preset name (codea1/presets/) or a YAML path (default {DEFAULT_PRESET})",
    )
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set coder.sampling.n=8 (repeatable)")  # fmt: skip
    p.add_argument("--method", choices=("a1", "golden", "selfplay"), help="train.method")
    p.add_argument("--tester-view", choices=("whitebox", "blackbox"), help="tester.view")
    p.add_argument("--alpha", type=float, help="reward.alpha (validity vs adversarial weight)")
    p.add_argument("--no-mistake-book", action="store_true", help="mistake_book.enabled=false (ablation)")
    p.add_argument("--steps", type=int, help="train.steps")
    p.add_argument("--run-dir", help="run directory (default runs/<preset>-<time>)")
    p.add_argument("--engine", choices=("transformers", "scripted"), help="engine.kind")
    p.add_argument("--progress", choices=("auto", "rich", "plain"), help="tracking.progress")
    p.add_argument(
        "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint"
    )
    p.set_defaults(func=run)


def flag_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The ``section.field=value`` overrides implied by the convenience flags, each with the flag
    that implies it (what an error about it names)."""
    out: dict[str, str] = {}
    if args.method:
        out[f"train.method={args.method}"] = f"--method {args.method}"
        if args.method == "selfplay" and not args.tester_view:
            out["tester.view=blackbox"] = "--method selfplay"
    if args.tester_view:
        out[f"tester.view={args.tester_view}"] = f"--tester-view {args.tester_view}"
    if args.alpha is not None:
        out[f"reward.alpha={args.alpha}"] = f"--alpha {args.alpha:g}"
    if args.no_mistake_book:
        out["mistake_book.enabled=false"] = "--no-mistake-book"
    if args.steps is not None:
        out[f"train.steps={args.steps}"] = f"--steps {args.steps}"
    if args.engine:
        out[f"engine.kind={args.engine}"] = f"--engine {args.engine}"
    if args.progress:
        out[f"tracking.progress={args.progress}"] = f"--progress {args.progress}"
    return out


def resolve(args: argparse.Namespace) -> tuple[RunConfig, Path, bool]:
    """The configuration, the run directory and whether this resumes an existing run."""
    if args.resume:
        cfg, run_dir = resume_config(args)
        check_machine(cfg, resume=True)
        return cfg, run_dir, True
    flags = flag_overrides(args)
    cfg = load_config(args.preset or DEFAULT_PRESET, [*args.overrides, *flags], labels=flags)
    check_machine(cfg, resume=False)
    if args.run_dir:
        run_dir = Path(args.run_dir)
    else:
        run_dir = Path(
            cfg.train.run_dir.format(preset=cfg.preset or "run", time=time.strftime("%Y%m%d-%H%M%S"))
        )
    check_new_run_dir(run_dir)
    return cfg, run_dir, False


def check_machine(cfg: RunConfig, *, resume: bool) -> None:
    """The sizes this machine bounds: ``sandbox.workers`` (a few per core; the Ray fan-out runs the
    sandbox on the cluster's nodes, which have their own cores)."""
    if cfg.engine.backend == "ray" and cfg.cluster.sandbox_fanout:
        return
    if cfg.sandbox.workers > MAX_WORKERS:  # refused by the configuration already
        return
    hint = " (on --resume: --set sandbox.workers=0)" if resume else ""
    try:
        check_workers(cfg.sandbox.workers, "sandbox.workers")
    except CliError as e:
        raise CliError(f"{e}{hint}") from None


def check_new_run_dir(run_dir: Path) -> None:
    """A new run needs a directory that does not exist yet or is empty, under a creatable parent."""
    if run_dir.exists() or run_dir.is_symlink():
        if not run_dir.is_dir():
            raise CliError(f"--run-dir {run_dir} is a file, not a directory")
        if any(p.name != LOCK_FILE for p in run_dir.iterdir()):
            raise CliError(
                f"run directory {run_dir} is not empty; use --resume {run_dir} or another --run-dir"
            )
        return
    parent = next((p for p in run_dir.parents if p.exists()), Path("."))
    if not parent.is_dir():
        raise CliError(f"--run-dir {run_dir}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"--run-dir {run_dir}: cannot create it ({parent} is not writable)")


def create_run_dir(run_dir: Path, cfg: RunConfig) -> None:
    """Create a new run's directory and write its config (the caller holds the lock)."""
    check_new_run_dir(run_dir)  # again: another process may have filled it meanwhile
    from codea1.config import dump_config

    dump_config(cfg, run_dir / RESUME_CONFIG)


def byte_lengths(cfg: RunConfig) -> RunConfig:
    """The scripted engine's tokens are bytes: ``cfg`` with the length limits widened so that its
    canned answers (whole solutions, several asserts) are neither cut nor skipped by limits sized
    for real tokens (checked again, as every changed configuration is)."""
    values: dict[str, int] = {}
    for role in ("coder", "tester"):
        sampling = getattr(cfg, role).sampling
        values[f"{role}.sampling.max_new_tokens"] = max(sampling.max_new_tokens, 4096)
        values[f"{role}.sampling.max_prompt_tokens"] = max(sampling.max_prompt_tokens, 16384)
    return with_values(cfg, values)


def expand_model_paths(cfg: RunConfig) -> RunConfig:
    """``cfg`` with ``${VAR}`` in the model fields filled from the environment (checked again); an
    unset variable is a clear error."""
    values: dict[str, str] = {}
    for name in ("coder_model", "tester_model"):
        value = getattr(cfg.engine, name)
        expanded = os.path.expandvars(value)
        if "$" in expanded:
            var = re.findall(r"\$\{?(\w+)", expanded)[0]
            raise CliError(
                f"engine.{name}={value!r} needs the environment variable {var}: set it to a model directory, "
                f"a .gguf file or a hub id (see docs/training.md), or pass --set engine.{name}=PATH"
            )
        values[f"engine.{name}"] = expanded
    return with_values(cfg, values)


def in_run_evaluator(cfg: RunConfig, run_dir: Path, train_problems: list[Any]) -> Any:
    """The evaluation inside the run (``eval.data``), its problems loaded and checked now, before
    the run directory is touched; None when ``eval.data`` is empty."""
    if not cfg.eval.data:
        return None
    from codea1.eval.in_training import InRunEvaluator
    from codea1.eval.runner import EvalInputError
    from codea1.sandbox.local import memory_limit_refusal

    if refusal := memory_limit_refusal(cfg.eval.memory_mb, "eval.memory_mb, the in-run evaluation's"):
        raise CliError(f"{refusal} (--set eval.memory_mb=N)")

    def say(msg: str) -> None:  # the runner's progress stays quiet; its warnings are shown
        if msg.startswith(("warning", "errata")):
            print(f"codea1 train: eval: {msg}", file=sys.stderr, flush=True)

    try:
        evaluator = InRunEvaluator(cfg.eval, run_dir, cfg.engine.role_model("coder"), cfg.engine.role_model("tester"),
                                   cfg.sandbox.workers, say)  # fmt: skip
    except EvalInputError as e:
        raise CliError(f"eval.data={cfg.eval.data!r}: {e}") from None
    shared = {p.id for p in train_problems} & {p.id for p in evaluator.problems}
    if shared:
        print(f"codea1 train: warning: eval.data shares {len(shared)} problems with data.train "
              f"(e.g. {sorted(shared)[0]}): they are not held out", file=sys.stderr, flush=True)  # fmt: skip
    return evaluator


def build_models(cfg: RunConfig, problems: list[Any], rollout: str | None = None) -> Roles:
    """The engine's roles (:func:`codea1.engine.build.build`); a build failure is a one-line error."""
    from codea1.engine.build import EngineBuildError, build

    try:
        return build(cfg, problems, rollout=rollout)
    except EngineBuildError as e:
        raise CliError(f"cannot build the engine: {e}") from None


def run(args: argparse.Namespace) -> int:
    """Entry point of ``codea1 train``; returns 0, or 130 when stopped by Ctrl-C after saving.

    Everything that can be checked is checked before the run directory is touched: the whole
    configuration, the data, the models and the sandbox. A resumed run is locked first (a finished
    one is only read: resuming it changes nothing); a new run's directory is created, locked and
    given its ``config.yaml`` only when training is about to start.
    """
    from codea1.checkpoint import CheckpointError
    from codea1.replay.mistake_book import BookFileError

    cfg, run_dir, resume = resolve(args)
    if resume and (done := finished_step(run_dir, cfg)) is not None:  # read only: not even the lock
        print(f"codea1 train: {run_dir} is finished (checkpoint of step {done}, train.steps={cfg.train.steps}): "
              f"nothing to do, nothing changed; to extend it raise train.steps in {run_dir / RESUME_CONFIG}, "
              "then --resume", flush=True)  # fmt: skip
        return 0
    malloc = malloc_in_use(cfg.engine, can_restart=getattr(args, "program", False))  # may restart
    try:
        with ExitStack() as held:
            if resume:
                held.enter_context(RunDirLock(run_dir))
            summary = _train(cfg, run_dir, resume, held, malloc)
    except RunDirBusy as e:
        raise CliError(f"{e}; wait for it to finish or stop it first") from None
    except (CheckpointError, BookFileError) as e:
        raise CliError(f"cannot resume {run_dir}: {e}") from None
    last = summary.last_metrics
    keys = (
        "coder/reward_mean",
        "tester/reward_mean",
        "exec/code_valid_rate",
        "replay/book_size",
        "time/step",
        "memory/peak_rss_gib",
    )
    shown = ", ".join(f"{k} {last[k]:.3f}" for k in keys if last.get(k) is not None)
    ckpt = f"checkpoint {summary.checkpoint}" if summary.checkpoint else "no checkpoint written"
    state = "stopped by Ctrl-C after" if summary.interrupted else "finished"
    print(f"codea1 train {state} step {summary.last_step}/{cfg.train.steps} | {shown}", flush=True)
    from codea1.tracking import read_metrics

    for line in what_changed(read_metrics(run_dir)):
        print(line, flush=True)
    print(f"run directory: {run_dir} ({ckpt})", flush=True)
    if summary.interrupted:
        print(f"resume with: codea1 train --resume {run_dir}", file=sys.stderr, flush=True)
        return 130
    return 0


def _train(cfg: RunConfig, run_dir: Path, resume: bool, held: ExitStack, malloc: str) -> Any:
    """Load data, models and the sandbox, then (new runs) create the run directory, and train;
    ``malloc`` says what the process allocates with, for the header."""
    from codea1.data.problems import DataError, load_problems
    from codea1.engine.base import EngineFailure
    from codea1.engine.build import expected_host_plan, rollout_engine
    from codea1.sandbox.cluster import ClusterSandbox
    from codea1.sandbox.local import Sandbox, SandboxUnavailable
    from codea1.trainer import Trainer, TrainingOutOfMemory

    if cfg.engine.kind == "transformers":
        cfg = expand_model_paths(cfg)
    models_line = cfg.engine.coder_model + (
        f" / {cfg.engine.tester_model}" if cfg.engine.tester_model else ""
    )
    sampler, why_not_vllm = rollout_engine(cfg.engine)
    if why_not_vllm:
        print(f"codea1 train: rollouts through transformers ({why_not_vllm}; see codea1 doctor)", flush=True)
    print(f"codea1 train | preset {cfg.preset} | method {cfg.train.method} | engine {cfg.engine.kind} "
          f"({cfg.engine.mode}, rollouts {sampler}) | models {models_line} | steps {cfg.train.steps} "
          f"| malloc {malloc} | run dir {run_dir}" + (" | resuming" if resume else ""), flush=True)  # fmt: skip
    try:
        problems = load_problems(cfg.data.train, limit=cfg.data.limit)
    except DataError as e:
        raise CliError(f"data.train={cfg.data.train!r}: {e}") from None
    if not problems:
        raise CliError(f"data.train={cfg.data.train!r} has no usable problems")
    if len(problems) < cfg.data.problems_per_step:
        raise CliError(
            f"data.problems_per_step={cfg.data.problems_per_step} exceeds the {len(problems)} "
            f"training problems of data.train={cfg.data.train!r}"
        )
    evaluator = in_run_evaluator(cfg, run_dir, problems)
    if not resume and cfg.engine.kind == "scripted":
        cfg = byte_lengths(cfg)
    models = build_models(cfg, problems, rollout=sampler)
    plan = expected_host_plan(cfg, sampler)
    if plan is not None:
        print(f"codea1 train: host memory: {plan.line()}; measured as memory/peak_rss_gib", flush=True)
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        if plan.total > MEMORY_WARNING_SHARE * machine:
            print(f"codea1 train: warning: the expected peak is {plan.total:.1f} GiB and this machine has "
                  f"{machine:.1f} GiB; docs/training.md (Memory) says what lowers it", file=sys.stderr, flush=True)  # fmt: skip
    held.callback(models.close)  # the Ray backend stops its actors; local engines hold nothing
    try:
        if cfg.engine.backend == "ray" and cfg.cluster.sandbox_fanout:
            sandbox = held.enter_context(ClusterSandbox(cfg.sandbox, cfg.cluster.sandbox_batch))
        else:
            sandbox = held.enter_context(Sandbox(cfg.sandbox))
    except SandboxUnavailable as e:
        raise CliError(str(e)) from None
    trainer = Trainer(cfg, models, problems, sandbox, run_dir, evaluator=evaluator)
    if not resume:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CliError(f"cannot create run directory {run_dir}: {e.strerror or e}") from None
        held.enter_context(RunDirLock(run_dir))
        create_run_dir(run_dir, cfg)
    try:
        return trainer.run(resume=resume)
    except TrainingOutOfMemory as e:
        raise CliError(str(e)) from None
    except EngineFailure as e:
        raise CliError(
            f"training stopped: {e}; the last checkpoint is intact, continue with "
            f"codea1 train --resume {run_dir}"
        ) from None
    except OSError as e:  # the run directory's disk is full or failing: what is written is whole
        raise CliError(
            f"training stopped: {os_error_line(e)}; the checkpoints written are intact: once the cause "
            f"is fixed (e.g. space freed), continue with codea1 train --resume {run_dir}"
        ) from None
