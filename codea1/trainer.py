"""The co-training loop (docs/algorithm.md, "The training step"): one :meth:`Trainer.train_step`
reads top to bottom in data-flow order, every phase timed as ``time/<phase>``.

sample problems → coder rollouts → code extraction → tester prompts → tester rollouts → sandbox
grid with Mistake-Book tests and rewards → Mistake Book update → advantages and tester-group
selection → policy updates → push weights → metrics. :meth:`Trainer.run` adds the run-directory
lock, checkpoints, resume (past damaged checkpoints, see checkpoint.py) and a clean stop on Ctrl-C.
Methods: ``a1`` (Code-A1), ``golden`` (coder alone on golden tests), ``selfplay`` (one model,
black-box tests that score its own code).

The engine is reached only through ``engine.base`` (the cli picks the concrete one), the sandbox
only as a :class:`~codea1.scoring.GridRunner`.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from codea1 import rollout as ro
from codea1.checkpoint import (
    TrainerState,
    capture_rng,
    load_latest_intact,
    restore_book,
    restore_rng,
    save_checkpoint,
)
from codea1.config import RunConfig, SamplingConfig
from codea1.core.advantages import AdvantageStats
from codea1.core.seeds import call_seed, epoch_order
from codea1.engine.base import Learner, Policy, SamplingParams, TrainBatch, push_weights
from codea1.eval.in_training import InRunEvaluator, due
from codea1.replay.mistake_book import MistakeBook, StepReport
from codea1.run_lock import RunDirLock
from codea1.scoring import (
    GoldenScore,
    GridRunner,
    ProblemScore,
    Score,
    ScoringItem,
    bind_policy_loss,
    score_batch,
    score_golden,
)
from codea1.tracking import Tracker, read_eval_points, truncate_metrics
from codea1.types import Problem, TestCase

BOOK_FILE = "mistake_book.sqlite"
OOM_KNOBS = (
    "coder/tester.optim.micro_batch_size, coder/tester.sampling.batch_size, "
    "coder/tester.sampling.max_new_tokens, engine.gradient_checkpointing=true, engine.mode=adapters"
)


class Models(Protocol):
    """The two roles as the engine built them (the same objects for both roles when shared)."""

    coder_policy: Policy
    coder_learner: Learner
    tester_policy: Policy
    tester_learner: Learner


class TrainingOutOfMemory(RuntimeError):
    """The engine ran out of memory; the message names the settings that reduce memory."""


class _StepAbandoned(Exception):
    """Ctrl-C arrived before the step committed anything; the step is dropped."""


@dataclass
class RunSummary:
    """How a run ended."""

    run_dir: Path
    first_step: int
    last_step: int
    interrupted: bool = False
    last_metrics: dict[str, Any] = field(default_factory=dict)
    checkpoint: Path | None = None


class ProblemSampler:
    """Seeded draws without replacement: a fresh permutation per epoch, incomplete tails dropped
    (the reference's ``RandomSampler`` with ``drop_last=True``). Its position is checkpointed."""

    def __init__(self, n_problems: int, batch: int, seed: int, shuffle: bool = True) -> None:
        if n_problems < batch:
            raise ValueError(f"data.problems_per_step={batch} exceeds the {n_problems} training problems")
        self.n, self.batch, self.seed, self.shuffle = n_problems, batch, seed, shuffle
        self.epoch, self.pos = 0, 0

    def _order(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.n)
        return epoch_order(self.seed, self.epoch, self.n)

    def next(self) -> list[int]:
        """Indices of the next batch of problems."""
        if self.pos + self.batch > self.n:
            self.epoch, self.pos = self.epoch + 1, 0
        out = self._order()[self.pos : self.pos + self.batch]
        self.pos += self.batch
        return [int(i) for i in out]

    def state(self) -> dict[str, int]:
        """Position, for checkpoints."""
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state(self, state: dict[str, int]) -> None:
        """Inverse of :meth:`state`."""
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])


def sampling_params(s: SamplingConfig, seed: int) -> SamplingParams:
    """Engine sampling parameters of one role (seeded per step and role, so resume is exact)."""
    return SamplingParams(s.n, s.temperature, s.top_p, s.top_k, s.max_new_tokens, seed)


def is_out_of_memory(e: BaseException) -> bool:
    """torch's OutOfMemoryError, a RuntimeError saying "out of memory", or MemoryError."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


# ---- samples, groups and metrics of one step ----------------------------------------------------


def _mean(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if len(xs) else 0.0


def _completion_stats(role: str, comps: Sequence[Any]) -> dict[str, float]:
    return {
        f"{role}/samples": float(len(comps)),
        f"{role}/response_tokens_mean": _mean([len(c.completion_ids) for c in comps]),
        f"{role}/truncated_rate": _mean([0.0 if c.finished else 1.0 for c in comps]),
    }


def step_metrics(
    rollout: ro.Rollout,
    scores: Sequence[Score],
    history: Mapping[str, Sequence[TestCase]],
    report: StepReport,
    book_size: int | None,
    *,
    has_tester: bool = True,
) -> dict[str, float]:
    """Rollout, execution and Mistake-Book metrics of one step (keys in docs/metrics.md).

    A method without a Test LLM (golden) logs no ``tester/`` keys, and a run without a Mistake Book
    (golden, or the book switched off: ``book_size`` None) logs no ``replay/`` keys, so plots show
    absent series rather than misleading zeros.
    """
    codes = [c for pr in rollout.problems for c in pr.codes]
    suites = [s for pr in rollout.problems for su in ({id(x): x for x in pr.suites}.values()) for s in su]
    rewards = [r for s in scores for r in s.code_rewards]
    m = _completion_stats("coder", [c.completion for c in codes])
    if has_tester:
        m |= _completion_stats("tester", suites)
        m["tester/skipped_prompts"] = float(sum(s.role == "tester" for s in rollout.skipped))
    m |= {
        "coder/reward_mean": _mean(rewards),
        "coder/reward_std": float(np.std(rewards)) if rewards else 0.0,
        "coder/extract_ok_rate": _mean([1.0 if c.extraction.ok else 0.0 for c in codes]),
        "coder/problems": float(len(rollout.problems)),
        "coder/skipped_prompts": float(sum(s.role == "coder" for s in rollout.skipped)),
        "exec/scoring_errors": float(sum(bool(s.error) for s in scores)),
    }
    problem_scores = [s for s in scores if isinstance(s, ProblemScore)]
    breakdowns = [b for s in problem_scores for b in s.breakdowns]
    if problem_scores:  # Code-A1 and self-play: R_T and its terms
        suite_r = [x for b in breakdowns for x in b.suites]
        hist = [b for b in breakdowns if b.history_total]
        m |= {
            "tester/reward_mean": _mean([x.reward for x in suite_r]),
            "tester/reward_std": float(np.std([x.reward for x in suite_r])) if suite_r else 0.0,
            "tester/validity_mean": _mean([x.validity for x in suite_r]),
            "tester/adversarial_mean": _mean([x.adversarial for x in suite_r]),
            "tester/valid_tests_mean": _mean([x.n_valid for x in suite_r]),
            "tester/invalid_tests_mean": _mean([x.n_invalid for x in suite_r]),
            "exec/code_valid_rate": _mean([1.0 if b.valid else 0.0 for b in breakdowns]),
            "exec/gen_pass_rate": _mean([x.pass_rate for x in suite_r if x.n_valid]),
            "exec/history_pass_rate": _mean([b.history_pass_rate for b in hist]),
            "exec/codes_with_history": float(len(hist)),
        }
        reasons = sorted({r for x in suite_r for r in x.invalid_by_reason})
        m |= {f"tester/invalid/{r}": _mean([x.invalid_by_reason.get(r, 0) for x in suite_r]) for r in reasons}
    else:  # golden tests
        golden = [s for s in scores if isinstance(s, GoldenScore)]
        m["exec/code_valid_rate"] = _mean([float(v) for s in golden for v in s.code_valid])
        m["exec/golden_pass_rate"] = _mean(rewards)
    grids = [s.grid for s in problem_scores if s.grid is not None]
    verdicts = [v.status for g in grids for row in g.verdicts for v in row]
    m["exec/verdicts"] = float(len(verdicts))
    m["exec/timeout_rate"] = _mean([1.0 if v == "timeout" else 0.0 for v in verdicts])
    m["exec/error_rate"] = _mean([1.0 if v == "error" else 0.0 for v in verdicts])
    if book_size is not None:
        m["replay/tests_retrieved"] = float(sum(len(v) for v in history.values()))
        m["replay/problems_hit"] = float(sum(1 for v in history.values() if v))
        m |= {f"replay/{k}": float(v) for k, v in report.to_dict().items() if k != "step"}
        m["replay/book_size"] = float(book_size)
    return m


def rollout_metrics(role: str, policy: Policy, groups: Sequence[Sequence[Any]]) -> dict[str, float]:
    """Rollout throughput of one role: ``rollout/<role>/tokens_per_s`` (the policy's last
    ``generate``, so call it right after the role's rollout) and the engine that sampled, as
    ``rollout/engine/<name>`` = 1."""
    stats = getattr(policy, "last_stats", {}) or {}
    out = {f"rollout/engine/{getattr(policy, 'name', type(policy).__name__)}": 1.0}
    if groups and "tokens_per_s" in stats:
        out[f"rollout/{role}/tokens_per_s"] = float(stats["tokens_per_s"])
    return out


def role_metrics(role: str, batch: ro.RoleBatch, stats: AdvantageStats) -> dict[str, float]:
    """What the role trains on: sample count, groups, zero-variance groups, advantage spread."""
    return {
        f"{role}/trained_samples": float(len(batch)),
        f"{role}/trained_reward_mean": _mean(batch.rewards),
        f"{role}/groups": float(stats.n_groups),
        f"{role}/zero_variance_groups": float(stats.n_zero_variance_groups),
        f"{role}/zero_variance_fraction": stats.n_zero_variance_groups / stats.n_groups
        if stats.n_groups
        else 0.0,
        f"{role}/adv_abs_max": stats.adv_abs_max,
    }


def _abort(signum: int, frame: Any) -> None:
    """A second SIGTERM while the checkpoint is pending: stop now (as a second Ctrl-C does)."""
    raise KeyboardInterrupt


def _to_stderr(text: str) -> None:
    print(f"codea1: {text}", file=sys.stderr, flush=True)


class Trainer:
    """Runs ``cfg.train.steps`` steps of the configured method in ``run_dir``.

    ``notice`` receives one-line notices about a damaged run directory found on resume (a checkpoint
    passed over, metrics lines skipped); by default they go to stderr.
    """

    def __init__(
        self,
        cfg: RunConfig,
        models: Models,
        problems: Sequence[Problem],
        sandbox: GridRunner,
        run_dir: Path,
        notice: Callable[[str], None] = _to_stderr,
        evaluator: InRunEvaluator | None = None,
    ) -> None:
        self.cfg, self.models, self.problems, self.sandbox = cfg, models, list(problems), sandbox
        self.notice = notice
        self.evaluator = evaluator
        self.run_dir = Path(run_dir)
        self.method = cfg.train.method
        self.shared = models.tester_learner is models.coder_learner
        self.sampler = ProblemSampler(
            len(self.problems), cfg.data.problems_per_step, cfg.data.seed, cfg.data.shuffle
        )
        self.loss_fn = bind_policy_loss(cfg.loss)
        self.book: MistakeBook | None = None
        self.tracker: Tracker | None = None
        self.stop_requested = False

    # ---- the step ----------------------------------------------------------------------------------

    def train_step(self, step: int) -> dict[str, float]:
        """One training step (docs/algorithm.md, steps 1–12); returns its metrics."""
        cfg, m, tracker = self.cfg, self.models, self.tracker
        assert tracker is not None and self.book is not None
        coder_seed, tester_seed = (call_seed(cfg.train.seed, step, role) for role in ("coder", "tester"))
        step_start = time.perf_counter()

        with tracker.phase("sample_problems"):
            problems = [self.problems[i] for i in self.sampler.next()]
        self._checkpoint_interrupt()

        with tracker.phase("coder_rollout"):
            coder_prompts, skipped = ro.coder_prompts(
                problems, m.coder_policy, cfg.coder.sampling.max_prompt_tokens
            )
            coder_groups = ro.sample(
                m.coder_policy, coder_prompts, sampling_params(cfg.coder.sampling, coder_seed)
            )
            rollout_stats = rollout_metrics("coder", m.coder_policy, coder_groups)
        self._checkpoint_interrupt()

        with tracker.phase("code_extraction"):
            codes = ro.extract_codes(problems, coder_prompts, coder_groups)

        tester_prompts: list[ro.Prompt] = []
        tester_groups: list[list[Any]] = []
        if self.method != "golden":
            with tracker.phase("tester_prompts"):
                tester_prompts, tester_skipped = ro.tester_prompts(
                    problems, coder_prompts, codes, m.tester_policy, view=cfg.tester.view,
                    tests_per_suite=cfg.tester.tests_per_suite,
                    max_prompt_tokens=cfg.tester.sampling.max_prompt_tokens,
                )  # fmt: skip
                skipped += tester_skipped
            with tracker.phase("tester_rollout"):
                tester_groups = ro.sample(
                    m.tester_policy, tester_prompts, sampling_params(cfg.tester.sampling, tester_seed)
                )
                rollout_stats |= rollout_metrics("tester", m.tester_policy, tester_groups)
            self._checkpoint_interrupt()
        rollout = ro.assemble(problems, coder_prompts, codes, tester_prompts, tester_groups, skipped)

        with tracker.phase("execution"):
            items = [
                ScoringItem(pr.problem, tuple(c.completion.text for c in pr.codes),
                            tuple(tuple(s.text for s in su) for su in pr.suites))
                for pr in rollout.problems
            ]  # fmt: skip
            scores: list[Score]
            if self.method == "golden":
                history: dict[str, list[TestCase]] = {}
                scores = list(score_golden(items, self.sandbox, reward=cfg.reward))
            else:
                history = self.book.retrieve_many(pr.problem.id for pr in rollout.problems)
                scores = list(score_batch(items, self.sandbox, reward=cfg.reward, history=history))
        self._checkpoint_interrupt()

        with tracker.phase("mistake_book"):
            updates = [s.mistakes for s in scores if isinstance(s, ProblemScore)]  # golden: none
            report = self.book.apply_step(step, updates)

        with tracker.phase("advantages"):
            adv = {"norm_by_std": cfg.loss.adv_norm_std, "eps": cfg.loss.adv_eps}
            coder_batch, coder_adv = ro.training_batch(ro.coder_samples(rollout, scores), **adv)
            tester_samples, selected = ro.tester_samples(rollout, scores, cfg.tester.update_n, self.method)
            tester_batch, tester_adv = ro.training_batch(tester_samples, **adv)

        update_stats: dict[str, float] = {}
        if self.shared:
            with tracker.phase("update"):
                update_stats |= self._update("coder", m.coder_learner, coder_batch.merge(tester_batch))
        else:
            with tracker.phase("update_coder"):
                update_stats |= self._update("coder", m.coder_learner, coder_batch)
            with tracker.phase("update_tester"):
                update_stats |= self._update("tester", m.tester_learner, tester_batch)

        with tracker.phase("push_weights"):
            self._push_weights()

        with tracker.phase("metrics"):
            has_tester = self.method != "golden"
            book_size = self.book.size() if has_tester and self.book.enabled else None
            metrics = step_metrics(rollout, scores, history, report, book_size, has_tester=has_tester)
            metrics |= role_metrics("coder", coder_batch, coder_adv)
            if has_tester:
                metrics |= role_metrics("tester", tester_batch, tester_adv)
                metrics["tester/groups_selected"] = float(sum(len(s) for s in selected))
            metrics |= update_stats
            metrics |= rollout_stats
            records = ro.sample_records(rollout, coder_batch, "coder", cfg.tracking.samples_per_step)
            records += ro.sample_records(rollout, tester_batch, "tester", cfg.tracking.samples_per_step)
            tracker.save_samples(step, records)
        metrics["time/step"] = time.perf_counter() - step_start
        return metrics

    def _push_weights(self) -> None:
        """The trainer moves each trained role's weights to the policy that samples it (once when
        one model plays both roles)."""
        m = self.models
        push_weights(m.coder_learner, m.coder_policy)
        if not self.shared:
            push_weights(m.tester_learner, m.tester_policy)

    def _update(self, role: str, learner: Learner, batch: ro.RoleBatch) -> dict[str, float]:
        """Old (and reference) log-probs, then ``ppo_epochs × mini_batches`` optimizer steps
        (one ``train_step`` each); stats averaged and re-keyed ``loss/<role>/…``.

        Recomputed old log-probs need a pass of their own only when there are several optimizer
        steps; with one, the weights that would recompute them are the weights being trained, so the
        learner reads them off its training forward pass (the same values, one pass fewer).
        """
        if len(batch) == 0:
            return {f"loss/{role}/optimizer_steps": 0.0}
        optim = (self.cfg.coder if role == "coder" else self.cfg.tester).optim
        tb = batch.train
        n_mini = min(optim.mini_batches, len(tb))
        n_steps = optim.ppo_epochs * n_mini
        if self.cfg.loss.old_logprobs == "sampling":
            tb.old_logprobs = batch.sampling_logprobs
        elif n_steps > 1:
            tb.old_logprobs = learner.logprobs(tb)
        else:  # one optimizer step: the learner takes them from its own forward pass (ratio 1)
            tb.old_logprobs = None
        if self.cfg.loss.keeps_reference:
            tb.ref_logprobs = learner.logprobs(tb, reference=True)
        bounds = np.linspace(0, len(tb), n_mini + 1).round().astype(int)
        sums: dict[str, float] = {}

        def cut(values: list | None, lo: int, hi: int) -> list | None:
            return None if values is None else values[lo:hi]

        for _ in range(optim.ppo_epochs):
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                part = TrainBatch(
                    tb.prompt_ids[lo:hi], tb.completion_ids[lo:hi], tb.advantages[lo:hi],
                    cut(tb.old_logprobs, lo, hi), cut(tb.ref_logprobs, lo, hi),
                )  # fmt: skip
                for k, v in learner.train_step(part, self.loss_fn).items():
                    sums[k] = sums.get(k, 0.0) + float(v)
        out = {f"loss/{role}/{k.removeprefix('loss/')}": v / n_steps for k, v in sums.items()}
        out[f"loss/{role}/optimizer_steps"] = float(n_steps)
        return out

    # ---- evaluation inside the run ---------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        """The evaluation point of ``step`` (0: before the first update) on the weights the policies
        hold now; logged to ``eval.jsonl`` and the trackers. Points already computed are reused."""
        assert self.evaluator is not None and self.tracker is not None
        start = time.perf_counter()
        metrics = self.evaluator.coder(step, self.models.coder_policy)
        if self.method != "golden" and self.cfg.eval.tester:
            metrics |= self.evaluator.tester(step, self.models.tester_policy, self.cfg.tester.view)
        metrics["eval/time_s"] = time.perf_counter() - start
        self.tracker.log_eval(step, metrics)
        return metrics

    def _evaluate_if_due(self, step: int) -> None:
        """Evaluate ``step`` when it is an evaluation point not yet logged (a resumed run catches up
        on the point of the step it resumes from)."""
        if self.evaluator is None or not due(step, self.cfg.eval.every, self.cfg.train.steps):
            return
        if step not in read_eval_points(self.run_dir):
            self.evaluate(step)

    # ---- interrupt -------------------------------------------------------------------------------------

    def _on_sigint(self, signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM: stop after this phase with a checkpoint; a second one aborts."""
        self.stop_requested = True
        what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if self.tracker is not None:
            self.tracker.message(
                f"{what}: saving a checkpoint at the end of this phase ({what} again to abort)"
            )
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _abort)

    def _checkpoint_interrupt(self) -> None:
        """Before the step commits anything (book, weights), Ctrl-C drops the step."""
        if self.stop_requested:
            raise _StepAbandoned

    # ---- the run -----------------------------------------------------------------------------------

    def _learners(self) -> dict[str, Learner]:
        if self.shared:
            return {"coder": self.models.coder_learner}
        return {"coder": self.models.coder_learner, "tester": self.models.tester_learner}

    def _state(self, step: int, metrics: dict[str, Any] | None = None) -> TrainerState:
        return TrainerState(step=step, sampler=self.sampler.state(), rng=capture_rng(), metrics=metrics)

    def _save(self, state: TrainerState) -> Path:
        book = self.run_dir / BOOK_FILE if self.book is not None and self.book.enabled else None
        return save_checkpoint(
            self.run_dir, state, self.cfg, self._learners(), book, self.cfg.train.keep_last
        )

    def _restore(self, resume: bool) -> int:
        """Load the newest intact checkpoint (and its book snapshot) when resuming, falling back past
        damaged ones with a notice; bring ``metrics.jsonl`` to that step. Returns the step done."""
        found = load_latest_intact(self.run_dir, self._learners()) if resume else None
        book_path = self.run_dir / BOOK_FILE
        if found is None:
            MistakeBook.remove_files(book_path)  # a crash before the first checkpoint
            self._repair_metrics(0, None)
            return 0
        for note in found.notes:
            self.notice(note)
        self._push_weights()
        if not restore_book(found.path, book_path):
            MistakeBook.remove_files(book_path)
        self.sampler.load_state(found.state.sampler)
        restore_rng(found.state.rng)
        self._repair_metrics(found.step, found.state.metrics)
        return found.step

    def _repair_metrics(self, step: int, row: dict[str, Any] | None) -> None:
        summary = truncate_metrics(self.run_dir, step, checkpoint_row=row).summary()
        if summary:
            self.notice(summary)

    def run(self, *, resume: bool = False, progress: str | None = None) -> RunSummary:
        """Train from step 1 (or after the newest intact checkpoint when ``resume``) to ``train.steps``,
        holding the run directory's lock (:class:`~codea1.run_lock.RunDirBusy` if another process
        holds it)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with RunDirLock(self.run_dir):
            return self._run(resume, progress)

    def _run(self, resume: bool, progress: str | None) -> RunSummary:
        cfg = self.cfg
        done = self._restore(resume)
        mb = cfg.mistake_book
        enabled = mb.enabled and self.method != "golden"
        self.book = MistakeBook(
            self.run_dir / BOOK_FILE, enabled=enabled, top_k=mb.top_k, capacity=mb.capacity_per_problem
        )
        tr = cfg.tracking
        self.tracker = Tracker(
            self.run_dir, total_steps=cfg.train.steps, tensorboard=tr.tensorboard, wandb=tr.wandb,
            wandb_project=tr.wandb_project, progress=progress or tr.progress, config=cfg.to_dict(),
            resume_step=done, samples_per_step=tr.samples_per_step,
        )  # fmt: skip
        summary = RunSummary(self.run_dir, first_step=done + 1, last_step=done)
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, self._on_sigint) if in_main else None
        previous_term = signal.signal(signal.SIGTERM, self._on_sigint) if in_main else None
        last_saved = done
        try:
            self._evaluate_if_due(done)
            for step in range(done + 1, cfg.train.steps + 1):
                start = self._state(step - 1, summary.last_metrics or None)
                try:
                    metrics = self.train_step(step)
                except _StepAbandoned:
                    self.sampler.load_state(start.sampler)  # the dropped step never happened
                    if last_saved < step - 1:
                        summary.checkpoint = self._save(start)
                    summary.interrupted = True
                    break
                except Exception as e:
                    if is_out_of_memory(e):
                        raise TrainingOutOfMemory(
                            f"out of memory in step {step} ({e}); reduce {OOM_KNOBS}"
                        ) from e
                    raise
                summary.last_metrics = self.tracker.log(step, metrics)
                summary.last_step = step
                if step % cfg.train.save_every == 0 or step == cfg.train.steps or self.stop_requested:
                    summary.checkpoint = self._save(self._state(step, summary.last_metrics))
                    last_saved = step
                if not self.stop_requested:
                    self._evaluate_if_due(step)
                if self.stop_requested:
                    summary.interrupted = True
                    break
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous)
                signal.signal(signal.SIGTERM, previous_term)
            self.tracker.close()
            self.book.close()
        return summary
