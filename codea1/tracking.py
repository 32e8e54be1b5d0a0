"""Where a run's numbers go: ``metrics.jsonl`` (always), TensorBoard and W&B (when enabled),
per-step rollout samples, phase timers and the live progress display.

Metric keys are namespaced ``coder/ tester/ exec/ replay/ loss/ time/ memory/`` (see ``docs/metrics.md``).
``metrics.jsonl`` holds one JSON object per step, appended and flushed as one write, so a crash
never leaves a torn line behind a complete one; :func:`truncate_metrics` drops lines past a
checkpoint on resume, keeping every readable earlier line and a copy of the original file.
TensorBoard and W&B are imported only when enabled.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.jsonl"
"""The run's evaluation points (docs/metrics.md, ``eval/``), one row per evaluated step."""
SAMPLES_DIR = "samples"
METRIC_NAMESPACES = ("coder/", "tester/", "exec/", "replay/", "loss/", "time/", "memory/")


class TrackingError(RuntimeError):
    """A requested sink cannot be used (for example ``wandb`` is not installed)."""


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def step_file_name(step: int, suffix: str = "") -> str:
    """``step_000004`` + suffix: the zero-padded per-step name used by samples and checkpoints."""
    return f"step_{step:06d}{suffix}"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (durable, never torn)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise named(e, path) from None


def named(e: OSError, path: Path) -> OSError:
    """``e`` naming ``path`` when it names no file (a failed write's ``[Errno 28] No space left on
    device`` does not say which file)."""
    if e.filename is not None or not e.strerror:
        return e
    return OSError(e.errno, e.strerror, str(path))


def _parse_metrics_line(raw: bytes) -> dict[str, Any] | None:
    """A metrics row, or None when the line is not a JSON object with an integer ``step``."""
    try:
        row = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(row, dict) or type(row.get("step")) is not int:
        return None
    return row


def _metrics_lines(path: Path) -> list[tuple[int, bytes, dict[str, Any] | None]]:
    """``(line number, raw line with its newline, row or None)`` for every line of the file.

    A last line without its newline is torn by definition (each row is written with its newline in
    one write) unless it parses; it is returned without a newline.
    """
    data = path.read_bytes()
    out = []
    for number, raw in enumerate(data.splitlines(keepends=True), start=1):
        body = raw.rstrip(b"\r\n")
        if body.strip():
            out.append((number, raw, _parse_metrics_line(body)))
    return out


def read_eval_points(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The evaluation points of a run (``eval.jsonl``) by step; a step logged twice (a run resumed
    after a crash) keeps its last row, and damaged lines are skipped."""
    path = Path(run_dir) / EVAL_FILE
    if not path.exists():
        return {}
    out: dict[int, dict[str, Any]] = {}
    for _, _, row in _metrics_lines(path):
        if row is not None and isinstance(row.get("step"), int):
            out[row["step"]] = row
    return out


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every readable line of ``metrics.jsonl`` (unreadable lines, such as a torn tail, are skipped)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    return [row for _, _, row in _metrics_lines(path) if row is not None]


def metrics_complete(run_dir: Path, last_step: int) -> bool:
    """Whether ``metrics.jsonl`` holds a readable line for every step up to ``last_step`` and nothing
    else: the file :func:`truncate_metrics` leaves as it is (resuming a finished run changes nothing)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return False
    lines = _metrics_lines(path)
    if b"".join(raw for _, raw, _ in lines) != path.read_bytes() or not all(
        r.endswith(b"\n") for _, r, _ in lines
    ):
        return False
    steps = [row["step"] if row is not None else None for _, _, row in lines]
    if None in steps or any(s > last_step for s in steps if s is not None):
        return False
    return set(range(1, last_step + 1)) <= set(steps)


@dataclass
class MetricsRepair:
    """What :func:`truncate_metrics` did to ``metrics.jsonl`` when a run resumed."""

    last_step: int
    kept: int = 0
    redone: list[int] = field(default_factory=list)
    """Steps after the checkpoint whose lines were dropped (those steps run again)."""
    unreadable: list[int] = field(default_factory=list)
    """Line numbers that were not a JSON object with an integer step (a torn tail, garbage)."""
    missing: list[int] = field(default_factory=list)
    """Steps up to the checkpoint that have no readable line."""
    restored: int | None = None
    """The checkpoint's step, when its line was missing and was restored from the checkpoint."""
    backup: Path | None = None
    """Where the original file was kept (None when the file was left as it was)."""

    def summary(self) -> str | None:
        """One line for the user, or None when the file was kept as it was."""
        if self.backup is None:
            return None
        parts = []
        if self.unreadable:
            parts.append(
                f"skipped {len(self.unreadable)} unreadable line(s) ({_spans(self.unreadable, 'line')})"
            )
        if self.redone:
            parts.append(
                f"dropped {len(self.redone)} line(s) of steps after checkpoint {self.last_step} "
                f"({_spans(self.redone, 'step')}, run again)"
            )
        if self.restored is not None:
            parts.append(f"restored the line of step {self.restored} from its checkpoint")
        if self.missing:
            parts.append(f"no metrics line for {_spans(self.missing, 'step')}")
        what = "; ".join(parts) or "rewrote the file"
        return f"{METRICS_FILE}: {what}; original kept as {self.backup.name}"


def _spans(numbers: Sequence[int], noun: str) -> str:
    """``step 4``, ``steps 4-6, 9`` (at most five spans shown)."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:5]]
    more = f" and {len(spans) - 5} more" if len(spans) > 5 else ""
    plural = "s" if len(set(numbers)) > 1 else ""
    return f"{noun}{plural} {', '.join(shown)}{more}"


def _free_backup_name(path: Path) -> Path:
    """``metrics.jsonl.orig``, else ``metrics.jsonl.orig.2``, ``.orig.3``, ... (never overwritten)."""
    candidate = path.with_name(path.name + ".orig")
    n = 2
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.orig.{n}")
        n += 1
    return candidate


def truncate_metrics(
    run_dir: Path, last_step: int, checkpoint_row: Mapping[str, Any] | None = None
) -> MetricsRepair:
    """Bring ``metrics.jsonl`` to the lines of steps ``<= last_step`` when a run resumes.

    Every readable line of a step up to ``last_step`` is kept byte for byte, wherever it sits (an
    unreadable line in the middle costs only itself); lines of later steps are dropped, as those
    steps run again. When anything changes, the original file is kept first as
    ``metrics.jsonl.orig`` (``.orig.2``, ... when that exists) and the new file replaces the old
    one atomically. ``checkpoint_row``, the row the checkpoint of ``last_step`` saved, replaces a
    missing line of that step (a torn last line then loses nothing). The returned
    :class:`MetricsRepair` says what was skipped.
    """
    path = Path(run_dir) / METRICS_FILE
    repair = MetricsRepair(last_step)
    if not path.exists():
        return repair
    original = path.read_bytes()
    keep: list[bytes] = []
    seen: set[int] = set()
    for number, raw, row in _metrics_lines(path):
        if row is None:
            repair.unreadable.append(number)
        elif row["step"] > last_step:
            repair.redone.append(row["step"])
        else:
            keep.append(raw if raw.endswith(b"\n") else raw + b"\n")
            seen.add(row["step"])
    if checkpoint_row is not None and checkpoint_row.get("step") == last_step and last_step not in seen:
        keep.append((json.dumps(dict(checkpoint_row), sort_keys=True) + "\n").encode("utf-8"))
        seen.add(last_step)
        repair.restored = last_step
    repair.kept = len(keep)
    repair.missing = [s for s in range(1, last_step + 1) if s not in seen]
    text = b"".join(keep)
    if text == original:
        return repair
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        backup = _free_backup_name(path)
        try:
            os.link(path, backup)  # the original inode stays, under the backup name
        except OSError:
            shutil.copy2(path, backup)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    repair.backup = backup
    return repair


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Tracker:
    """Logs one dictionary of scalars per step to every enabled sink, and times phases.

    ``phase(name)`` is a context manager that records ``time/<name>`` for the current step and
    updates the progress display. ``log(step, metrics)`` writes the step (adding the recorded phase
    times) and resets the timers.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        total_steps: int,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_project: str = "codea1",
        progress: Literal["auto", "rich", "plain", "off"] = "auto",
        config: Mapping[str, Any] | None = None,
        resume_step: int = 0,
        samples_per_step: int = 8,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.total_steps = total_steps
        self.samples_per_step = samples_per_step
        self._times: dict[str, float] = {}
        self._metrics_file = open(self.run_dir / METRICS_FILE, "a", encoding="utf-8")  # noqa: SIM115
        self._tb = _open_tensorboard(self.run_dir / "tensorboard", resume_step) if tensorboard else None
        self._wandb = _open_wandb(wandb_project, self.run_dir, config) if wandb else None
        self.display = ProgressDisplay(progress, total_steps, start_step=resume_step)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the current step as ``time/<name>`` (accumulates if entered twice)."""
        self.display.set_phase(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self._times[name] = self._times.get(name, 0.0) + time.perf_counter() - start

    def log(self, step: int, metrics: Mapping[str, float]) -> dict[str, Any]:
        """Write one step's metrics (plus phase times) everywhere; returns the row written."""
        row: dict[str, Any] = {"step": step}
        row.update({k: _finite(float(v)) for k, v in metrics.items()})
        row.update({f"time/{k}": round(v, 4) for k, v in self._times.items()})
        self._times = {}
        try:
            self._metrics_file.write(json.dumps(row, sort_keys=True) + "\n")
            self._metrics_file.flush()
            os.fsync(self._metrics_file.fileno())
        except OSError as e:
            raise named(e, self.run_dir / METRICS_FILE) from None
        self._to_sinks(step, row)
        self.display.step_done(step, row)
        return row

    def _to_sinks(self, step: int, row: Mapping[str, Any]) -> dict[str, Any]:
        """A row's scalars to TensorBoard and W&B at ``step``; returns the scalars."""
        scalars = {k: v for k, v in row.items() if k != "step" and v is not None}
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)
        return scalars

    def log_eval(self, step: int, metrics: Mapping[str, float]) -> dict[str, Any]:
        """Write one evaluation point (``eval/...`` metrics of ``step``; 0 = before training) to
        ``eval.jsonl``, TensorBoard and W&B, and say it on the display; returns the row."""
        row: dict[str, Any] = {"step": step, **{k: _finite(float(v)) for k, v in metrics.items()}}
        path = self.run_dir / EVAL_FILE
        torn = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
        with open(path, "a", encoding="utf-8") as f:
            f.write(("\n" if torn else "") + json.dumps(row, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        scalars = self._to_sinks(step, row)
        shown = ", ".join(
            f"{k.removeprefix('eval/')} {v:.1f}" for k, v in scalars.items() if k != "eval/time_s"
        )
        self.display.message(f"eval step {step} | {shown}")
        return row

    def save_samples(self, step: int, records: Sequence[Mapping[str, Any]]) -> Path:
        """Write the step's bounded rollout sample to ``samples/step_NNNNNN.jsonl`` (atomically)."""
        directory = self.run_dir / SAMPLES_DIR
        directory.mkdir(exist_ok=True)
        path = directory / step_file_name(step, ".jsonl")
        atomic_write_text(path, "".join(json.dumps(r, default=str) + "\n" for r in records))
        return path

    def message(self, text: str) -> None:
        """A log line (above the live display on a terminal)."""
        self.display.message(text)

    def close(self) -> None:
        """Flush and close every sink."""
        self.display.close()
        self._metrics_file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _open_tensorboard(log_dir: Path, resume_step: int) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:  # tensorboard is a core dependency; say so if it is missing
        raise TrackingError(f"tracking.tensorboard=true needs the tensorboard package ({e})") from None
    # purge_step discards events written after the checkpoint we resume from
    return SummaryWriter(str(log_dir), purge_step=resume_step + 1 if resume_step else None)


def _open_wandb(project: str, run_dir: Path, config: Mapping[str, Any] | None) -> Any:
    try:
        import wandb
    except ImportError:
        raise TrackingError(
            "tracking.wandb=true but wandb is not installed: pip install 'codea1[wandb]' "
            "(or set tracking.wandb=false)"
        ) from None
    wandb.init(project=project, name=run_dir.name, dir=str(run_dir), config=dict(config or {}))
    return wandb


KEY_METRICS = ("coder/reward_mean", "tester/reward_mean", "exec/code_valid_rate")


class ProgressDisplay:
    """Step, phase, ETA and key rewards: a ``rich`` status line on a terminal, plain lines otherwise."""

    def __init__(self, mode: str, total_steps: int, start_step: int = 0) -> None:
        if mode == "auto":
            mode = "rich" if sys.stdout.isatty() else "plain"
        self.mode = mode
        self.total = total_steps
        self.step = start_step
        self._started = time.perf_counter()
        self._done_here = 0
        self._last = ""
        self._status: Any = None
        if mode == "rich":
            from rich.console import Console

            self._console = Console()
            self._status = self._console.status(self._line("starting"))
            self._status.start()

    def _eta(self) -> str:
        if not self._done_here:
            return "?"
        per_step = (time.perf_counter() - self._started) / self._done_here
        return f"{per_step * (self.total - self.step):.0f}s"

    def _line(self, phase: str) -> str:
        tail = f" | {self._last}" if self._last else ""
        return f"step {self.step + 1}/{self.total} | {phase} | ETA {self._eta()}{tail}"

    def set_phase(self, phase: str) -> None:
        """Show the phase the current step is in."""
        if self._status is not None:
            self._status.update(self._line(phase))

    def step_done(self, step: int, row: Mapping[str, Any]) -> None:
        """Record a finished step and print its summary line."""
        self.step = step
        self._done_here += 1
        parts = [
            f"{k.split('/', 1)[0]} {k.split('/', 1)[1]} {row[k]:.3f}"
            for k in KEY_METRICS
            if row.get(k) is not None
        ]
        self._last = ", ".join(parts)
        took = row.get("time/step")
        line = (
            f"step {step}/{self.total}"
            + (f" ({took:.1f}s)" if took else "")
            + f" | {self._last} | ETA {self._eta()}"
        )
        self.message(line)

    def message(self, text: str) -> None:
        """Print a line (rich keeps the status line below it)."""
        if self.mode == "rich":
            self._console.print(text)
        elif self.mode == "plain":
            print(text, flush=True)

    def close(self) -> None:
        """Stop the live display."""
        if self._status is not None:
            self._status.stop()
            self._status = None
