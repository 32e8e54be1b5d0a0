"""``codea1 train --resume RUN_DIR``: the flags a resumed run accepts, its saved configuration read
strictly, and a finished run recognised before anything is loaded.

A resumed run computes what its ``config.yaml`` says. Each flag of ``codea1 train`` is therefore
either accepted (``--progress``; ``--set`` of where the run executes: ``cluster.*``,
``engine.backend``, ``sandbox.workers``; any flag that restates the saved value) or refused in one
line naming the saved value. A ``config.yaml`` that is empty, not YAML or lacks a section is refused
before a model loads. A run whose newest checkpoint is intact at its last step is finished: resuming
it says so and changes nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from codea1.cli import CliError
from codea1.cli.outputs import same_file
from codea1.config import RunConfig, load_config, read_mapping

RESUME_CONFIG = "config.yaml"
RESUME_SETTABLE = ("cluster.", "engine.backend=", "sandbox.workers=")
"""What ``--set`` may change on ``--resume``: where the run executes, not what it computes (a
checkpoint loads into any number of learner workers and into either backend; the sandbox's worker
count changes only how many programs run at once)."""
SECTIONS = (
    "data",
    "coder",
    "tester",
    "reward",
    "mistake_book",
    "loss",
    "sandbox",
    "engine",
    "train",
    "tracking",
)
"""Sections every saved ``config.yaml`` holds (every version wrote them; a later one adds more)."""


def check_run_dir(run_dir: Path) -> None:
    """``RUN_DIR`` must be a directory holding a ``config.yaml``."""
    if not run_dir.is_dir():
        raise CliError(f"--resume {run_dir}: not a directory (give the run directory to continue)")
    if not (run_dir / RESUME_CONFIG).is_file():
        raise CliError(f"--resume {run_dir}: no {RESUME_CONFIG} there (not a codea1 run directory)")


def _copy_hint(run_dir: Path) -> str:
    from codea1.checkpoint import latest_checkpoint

    found = latest_checkpoint(run_dir)
    if found is not None and (found[1] / RESUME_CONFIG).is_file():
        return f"; the newest checkpoint holds a copy: {found[1] / RESUME_CONFIG}"
    return ""


def saved_config(run_dir: Path, overrides: list[str]) -> RunConfig:
    """The run's configuration from ``RUN_DIR/config.yaml`` with ``overrides`` applied; a damaged
    file (empty, not YAML, a section missing) is a :class:`CliError` before anything is loaded."""
    path = run_dir / RESUME_CONFIG
    raw = read_mapping(path)
    if not raw:
        raise CliError(f"--resume {run_dir}: {RESUME_CONFIG} is empty (damaged?); nothing was loaded or "
                       f"changed{_copy_hint(run_dir)}")  # fmt: skip
    missing = [s for s in SECTIONS if s not in raw]
    if missing:
        raise CliError(f"--resume {run_dir}: {RESUME_CONFIG} lacks the section(s) {', '.join(missing)} "
                       f"(truncated?); nothing was loaded or changed{_copy_hint(run_dir)}")  # fmt: skip
    return load_config(str(path), overrides)


def _flag_values(args: argparse.Namespace) -> list[tuple[str, str, Any]]:
    """``(flag as given, config key, the value it sets)`` for each flag given that sets the config."""
    given: list[tuple[str, str, Any]] = []
    if args.method:
        given.append((f"--method {args.method}", "train.method", args.method))
    if args.tester_view:
        given.append((f"--tester-view {args.tester_view}", "tester.view", args.tester_view))
    if args.alpha is not None:
        given.append((f"--alpha {args.alpha:g}", "reward.alpha", float(args.alpha)))
    if args.no_mistake_book:
        given.append(("--no-mistake-book", "mistake_book.enabled", False))
    if args.steps is not None:
        given.append((f"--steps {args.steps}", "train.steps", args.steps))
    if args.engine:
        given.append((f"--engine {args.engine}", "engine.kind", args.engine))
    return given


def _shown(value: Any) -> str:
    """A saved value as ``--set`` writes it (``true``, ``0.5``, ``a1``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _value(cfg: RunConfig, key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def check_flags(args: argparse.Namespace, run_dir: Path, saved: RunConfig) -> None:
    """Refuse (one :class:`CliError` line) every flag that would change the saved configuration or
    the run directory; a flag that restates the saved value is accepted."""
    keep = f"--resume continues {run_dir} with its saved configuration"
    edit = f"drop it, or edit {run_dir / RESUME_CONFIG} first"
    if args.preset:
        raise CliError(f"{keep}; drop --preset {args.preset} (the run's {RESUME_CONFIG} takes its place)")
    changed = [o for o in args.overrides if not o.strip().startswith(RESUME_SETTABLE)]
    if changed:
        raise CliError(
            f"{keep}; --set {changed[0]} would change it (on resume --set takes only cluster.*, "
            "engine.backend and sandbox.workers: where the run executes)"
        )
    for flag, key, value in _flag_values(args):
        was = _value(saved, key)
        if value != was:
            hint = "; to extend the run raise train.steps there" if key == "train.steps" else ""
            raise CliError(f"{keep}: {flag} would change {key}={_shown(was)}; {edit}{hint}")
    if args.run_dir and not same_file(args.run_dir, run_dir):
        raise CliError(f"--run-dir {args.run_dir} is not the run directory {run_dir} of --resume: a resumed "
                       "run stays in its directory; drop --run-dir")  # fmt: skip


def resume_config(args: argparse.Namespace) -> tuple[RunConfig, Path]:
    """The configuration and the directory of ``codea1 train --resume RUN_DIR``, every flag checked."""
    run_dir = Path(args.resume)
    check_run_dir(run_dir)
    progress = [f"tracking.progress={args.progress}"] if args.progress else []
    cfg = saved_config(run_dir, [*args.overrides, *progress])
    check_flags(args, run_dir, cfg)
    return cfg, run_dir


def finished_step(run_dir: Path, cfg: RunConfig) -> int | None:
    """The step of a finished run: its newest checkpoint is at (or past) ``train.steps``, intact
    (:func:`~codea1.checkpoint.verify_checkpoint`), and nothing of the run needs repair (every
    metrics line up to it, the last evaluation point). None when resuming has work to do."""
    from codea1.checkpoint import CheckpointError, latest_checkpoint, verify_checkpoint
    from codea1.eval.in_training import due
    from codea1.tracking import metrics_complete, read_eval_points

    found = latest_checkpoint(run_dir)
    if found is None or found[0] < cfg.train.steps:
        return None
    step, path = found
    try:
        verify_checkpoint(path)
    except CheckpointError:
        return None  # damaged: resuming falls back to an older checkpoint, and says so
    if not metrics_complete(run_dir, step):
        return None
    if cfg.eval.data and due(step, cfg.eval.every, cfg.train.steps) and step not in read_eval_points(run_dir):
        return None
    return step
