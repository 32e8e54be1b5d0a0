"""The co-training loop (docs/algorithm.md, "The training step"): one :meth:`Trainer.train_step`
reads top to bottom in data-flow order, every phase timed as ``time/<phase>``.

sample problems → coder rollouts → code extraction → tester prompts → tester rollouts → sandbox
grid with Mistake-Book tests and rewards → Mistake Book update → advantages and tester-group
selection → policy updates → push weights → metrics (assembled in :mod:`codea1.step_metrics`).
:meth:`Trainer.run` adds the run-directory lock, checkpoints, resume (past damaged checkpoints, see
checkpoint.py) and a clean stop on Ctrl-C. Methods: ``a1`` (Code-A1), ``golden`` (coder alone on
golden tests: no Test LLM, ``train.trains_tester`` is False), ``selfplay`` (one model, black-box
tests that score its own code).

The engine is reached only through ``engine.base`` (:class:`~codea1.engine.base.Roles`; the cli
picks the concrete engine), the sandbox only as a :class:`~codea1.scoring.GridRunner`.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from codea1 import rollout as ro
from codea1.checkpoint import (
    BOOK_FILE,
    TrainerState,
    capture_rng,
    load_latest_intact,
    restore_book,
    restore_rng,
    save_checkpoint,
)
from codea1.config import RunConfig, SamplingConfig
from codea1.core.cuts import even_cuts
from codea1.core.seeds import call_seed
from codea1.data.problem_sampler import ProblemSampler
from codea1.engine.base import Learner, Roles, SamplingParams, push_weights
from codea1.eval.in_training import InRunEvaluator, due
from codea1.replay.mistake_book import MistakeBook
from codea1.run_lock import RunDirLock
from codea1.scoring import GridRunner, ProblemScore, Score, bind_policy_loss, score_batch, score_golden
from codea1.step_metrics import (
    TrainedRole,
    memory_metrics,
    sampling_metrics,
    step_metrics,
    sync_metrics,
    tester_prompt_metrics,
    update_metrics,
)
from codea1.tracking import Tracker, read_eval_points, truncate_metrics
from codea1.training_mutants import MutantPool
from codea1.types import Problem

T = TypeVar("T")

OOM_KNOBS = (
    "coder/tester.optim.micro_batch_size (or micro_batch_tokens), coder/tester.sampling.batch_size, "
    "coder/tester.sampling.max_new_tokens, engine.gradient_checkpointing=true, engine.logprob_chunk, "
    "engine.mode=adapters, on a CPU engine.cpu_malloc=tcmalloc, or engine.cpu_heap=return with "
    "engine.cpu_mmap_threshold=4194304"
)


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


def sampling_params(s: SamplingConfig, seed: int) -> SamplingParams:
    """Engine sampling parameters of one role (seeded per step and role, so resume is exact)."""
    return SamplingParams(s.n, s.temperature, s.top_p, s.top_k, s.max_new_tokens, seed)


def is_out_of_memory(e: BaseException) -> bool:
    """torch's OutOfMemoryError, a RuntimeError saying "out of memory", or MemoryError."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def side_by_side(*jobs: Callable[[], T]) -> list[T]:
    """Run ``jobs`` in threads of their own and return their results in order, after every job has
    ended; the first failure, in order, is raised. For calls that wait on other devices (a Ray
    learner group per role), not for computing in this process."""
    pool = ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="codea1-role")
    try:
        futures = [pool.submit(job) for job in jobs]
        wait(futures)
    finally:  # a second Ctrl-C leaves the jobs' threads behind instead of waiting for them
        pool.shutdown(wait=False, cancel_futures=True)
    return [f.result() for f in futures]


def _abort_now(signum: int, frame: Any) -> None:
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
        models: Roles,
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
        self.shared = models.tester_learner is models.coder_learner
        self.sampler = ProblemSampler(
            len(self.problems), cfg.data.problems_per_step, cfg.data.seed, cfg.data.shuffle
        )
        self.loss_fn = bind_policy_loss(cfg.loss)
        self.mutants = MutantPool(  # D12's, once a run; twins are looked for among eval's mutants
            cfg.reward.mutation_mutants, cfg.reward.mutation_seed, eval_mutants=cfg.eval.max_mutants
        )
        self.book: MistakeBook | None = None
        self.tracker: Tracker | None = None
        self.stop_requested = False

    # ---- the step ----------------------------------------------------------------------------------

    def train_step(self, step: int) -> dict[str, float]:
        """One training step (docs/algorithm.md, steps 1–12); returns its metrics."""
        cfg, m, tracker, book = self.cfg, self.models, self.tracker, self.book
        assert tracker is not None and book is not None
        trains_tester = cfg.train.trains_tester
        coder_seed, tester_seed = (call_seed(cfg.train.seed, step, role) for role in ("coder", "tester"))
        step_start = time.perf_counter()

        with tracker.phase("sample_problems"):
            problems = [self.problems[i] for i in self.sampler.next()]
        self._drop_step_if_stopping()

        with tracker.phase("coder_rollout"):
            coder_prompts, skipped = ro.coder_prompts(
                problems, m.coder_policy, cfg.coder.sampling.max_prompt_tokens
            )
            coder_groups = ro.sample(
                m.coder_policy, coder_prompts, sampling_params(cfg.coder.sampling, coder_seed)
            )
            sampling_stats = sampling_metrics("coder", m.coder_policy, coder_groups)
        self._drop_step_if_stopping()

        with tracker.phase("code_extraction"):
            codes = ro.extract_codes(problems, coder_prompts, coder_groups)

        tester_prompts: list[ro.Prompt] = []
        tester_groups: list[list[Any]] = []
        if trains_tester:
            with tracker.phase("tester_prompts"):
                tester_prompts, tester_skipped = ro.tester_prompts(
                    problems, coder_prompts, codes, m.tester_policy, view=cfg.tester.view,
                    tests_per_suite=cfg.tester.tests_per_suite,
                    max_prompt_tokens=cfg.tester.sampling.max_prompt_tokens,
                    whitebox_share=cfg.tester.whitebox_share, seed=tester_seed,
                )  # fmt: skip
                skipped += tester_skipped
                sampling_stats |= tester_prompt_metrics(tester_prompts)
            with tracker.phase("tester_rollout"):
                tester_groups = ro.sample(
                    m.tester_policy, tester_prompts, sampling_params(cfg.tester.sampling, tester_seed)
                )
                sampling_stats |= sampling_metrics("tester", m.tester_policy, tester_groups)
            self._drop_step_if_stopping()
        rollout = ro.assemble(problems, coder_prompts, codes, tester_prompts, tester_groups, skipped)

        with tracker.phase("execution"):
            items = ro.scoring_items(rollout)  # with the code extracted above: not extracted again
            history = book.retrieve_many(pr.problem.id for pr in rollout.problems) if trains_tester else {}
            scores: Sequence[Score] = (  # golden: the coder alone, on the golden tests
                score_batch(items, self.sandbox, reward=cfg.reward, history=history, mutants=self.mutants)
                if trains_tester else score_golden(items, self.sandbox, reward=cfg.reward)
            )  # fmt: skip
        self._drop_step_if_stopping()

        with tracker.phase("mistake_book"):
            updates = [s.mistakes for s in scores if isinstance(s, ProblemScore)]  # golden: none
            report = book.apply_step(step, updates)

        with tracker.phase("advantages"):
            adv = {"norm_by_std": cfg.loss.adv_norm_std, "eps": cfg.loss.adv_eps}
            coder_batch, coder_adv = ro.training_batch(ro.coder_samples(rollout, scores), **adv)
            tester_samples, selected = ro.tester_samples(rollout, scores, cfg.tester.update_n)
            tester_batch, tester_adv = ro.training_batch(tester_samples, **adv)  # golden: empty

        update_stats: dict[str, float] = {}
        if self.shared:
            with tracker.phase("update"):
                update_stats |= self._update_role("coder", m.coder_learner, coder_batch.merge(tester_batch))
        elif m.updates_overlap:  # each role on devices of its own: both at once, the same results
            with tracker.phase("update"):
                coder_stats, tester_stats = side_by_side(
                    lambda: self._update_role("coder", m.coder_learner, coder_batch),
                    lambda: self._update_role("tester", m.tester_learner, tester_batch),
                )
                update_stats |= coder_stats | tester_stats
        else:
            with tracker.phase("update_coder"):
                update_stats |= self._update_role("coder", m.coder_learner, coder_batch)
            with tracker.phase("update_tester"):
                update_stats |= self._update_role("tester", m.tester_learner, tester_batch)

        with tracker.phase("push_weights"):
            self._push_weights()
            sampling_stats |= sync_metrics("coder", m.coder_policy)
            if not self.shared:
                sampling_stats |= sync_metrics("tester", m.tester_policy)

        with tracker.phase("metrics"):
            metrics = step_metrics(
                rollout, scores, history=history, report=report,
                book_size=book.size() if book.enabled else None,
                coder=TrainedRole(coder_batch, coder_adv),
                tester=TrainedRole(tester_batch, tester_adv) if trains_tester else None,
                groups_selected=selected,
            )  # fmt: skip
            metrics |= update_stats | sampling_stats | memory_metrics()
            limit = cfg.tracking.samples_per_step
            records = ro.sample_records(rollout, coder_batch, "coder", limit)
            records += ro.sample_records(rollout, tester_batch, "tester", limit)
            tracker.save_samples(step, records)
        metrics["time/step"] = time.perf_counter() - step_start
        return metrics

    def _update_role(self, role: str, learner: Learner, batch: ro.RoleBatch) -> dict[str, float]:
        """Old (and reference) log-probs, then ``ppo_epochs × mini_batches`` optimizer steps
        (one ``train_step`` each); stats averaged and re-keyed ``loss/<role>/…``.

        Recomputed old log-probs need a pass of their own only when there are several optimizer
        steps; with one, the weights that would recompute them are the weights being trained, so the
        learner reads them off its training forward pass (the same values, one pass fewer).
        """
        if len(batch) == 0:
            return update_metrics(role, {}, 0)
        optim = (self.cfg.coder if role == "coder" else self.cfg.tester).optim
        tb = batch.train
        if optim.skip_without_signal and not any(tb.advantages):
            return update_metrics(role, {}, 0, skipped_without_signal=True)
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
        sums: dict[str, float] = {}
        for _ in range(optim.ppo_epochs):
            for mini in even_cuts(len(tb), n_mini):
                for k, v in learner.train_step(tb.slice(mini.start, mini.stop), self.loss_fn).items():
                    sums[k] = sums.get(k, 0.0) + float(v)
        return update_metrics(role, sums, n_steps)

    def _push_weights(self) -> None:
        """The trainer moves each trained role's weights to the policy that samples it (once when
        one model plays both roles)."""
        m = self.models
        if self.shared:
            push_weights(m.coder_learner, m.coder_policy)
        elif m.updates_overlap:
            side_by_side(
                lambda: push_weights(m.coder_learner, m.coder_policy),
                lambda: push_weights(m.tester_learner, m.tester_policy),
            )
        else:
            push_weights(m.coder_learner, m.coder_policy)
            push_weights(m.tester_learner, m.tester_policy)

    # ---- evaluation inside the run ---------------------------------------------------------------

    def evaluate(self, step: int) -> dict[str, float]:
        """The evaluation point of ``step`` (0: before the first update) on the weights the policies
        hold now; logged to ``eval.jsonl`` and the trackers. Points already computed are reused."""
        assert self.evaluator is not None and self.tracker is not None
        start = time.perf_counter()
        metrics = self.evaluator.coder(step, self.models.coder_policy)
        if self.cfg.train.trains_tester and self.cfg.eval.tester:
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

    # ---- stopping --------------------------------------------------------------------------------------

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM: stop after this phase with a checkpoint; a second one aborts."""
        self.stop_requested = True
        what = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if self.tracker is not None:
            self.tracker.message(
                f"{what}: saving a checkpoint at the end of this phase ({what} again to abort)"
            )
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _abort_now)

    def _drop_step_if_stopping(self) -> None:
        """Before the step commits anything (book, weights), a stop request drops the step: the run
        saves the previous step's state instead (see :meth:`_run`)."""
        if self.stop_requested:
            raise _StepAbandoned

    # ---- the run -----------------------------------------------------------------------------------

    def run(self, *, resume: bool = False, progress: str | None = None) -> RunSummary:
        """Train from step 1 (or after the newest intact checkpoint when ``resume``) to ``train.steps``,
        holding the run directory's lock (:class:`~codea1.run_lock.RunDirBusy` if another process
        holds it)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with RunDirLock(self.run_dir):
            return self._run(resume, progress)

    def _run(self, resume: bool, progress: str | None) -> RunSummary:
        cfg = self.cfg
        done = self._restore_checkpoint(resume)
        mb = cfg.mistake_book
        self.book = MistakeBook(
            self.run_dir / BOOK_FILE, enabled=mb.enabled and cfg.train.trains_tester, top_k=mb.top_k,
            capacity=mb.capacity_per_problem,
        )  # fmt: skip
        tr = cfg.tracking
        self.tracker = Tracker(
            self.run_dir, total_steps=cfg.train.steps, tensorboard=tr.tensorboard, wandb=tr.wandb,
            wandb_project=tr.wandb_project, progress=progress or tr.progress, config=cfg.to_dict(),
            resume_step=done, samples_per_step=tr.samples_per_step,
        )  # fmt: skip
        summary = RunSummary(self.run_dir, first_step=done + 1, last_step=done)
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, self._on_stop_signal) if in_main else None
        previous_term = signal.signal(signal.SIGTERM, self._on_stop_signal) if in_main else None
        last_saved = done
        try:
            self._evaluate_if_due(done)
            for step in range(done + 1, cfg.train.steps + 1):
                start = self._trainer_state(step - 1, summary.last_metrics or None)
                try:
                    metrics = self.train_step(step)
                except _StepAbandoned:
                    self.sampler.load_state(start.sampler)  # the dropped step never happened
                    if last_saved < step - 1:
                        summary.checkpoint = self._save_checkpoint(start)
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
                    summary.checkpoint = self._save_checkpoint(
                        self._trainer_state(step, summary.last_metrics)
                    )
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

    def _restore_checkpoint(self, resume: bool) -> int:
        """Load the newest intact checkpoint (and its book snapshot) when resuming, falling back past
        damaged ones with a notice; bring ``metrics.jsonl`` to that step. Returns the step done
        (0 for a fresh start, whose leftover book files are removed)."""
        found = load_latest_intact(self.run_dir, self._trained_learners()) if resume else None
        book_path = self.run_dir / BOOK_FILE
        if found is None:
            MistakeBook.remove_files(book_path)  # a crash before the first checkpoint
            self._truncate_metrics(0, None)
            return 0
        for note in found.notes:
            self.notice(note)
        self._push_weights()
        if not restore_book(found.path, book_path):
            MistakeBook.remove_files(book_path)
        self.sampler.load_state(found.state.sampler)
        restore_rng(found.state.rng)
        self._truncate_metrics(found.step, found.state.metrics)
        return found.step

    def _truncate_metrics(self, step: int, row: dict[str, Any] | None) -> None:
        """Drop ``metrics.jsonl`` lines after ``step`` (restoring the checkpoint's ``row``), with a notice."""
        summary = truncate_metrics(self.run_dir, step, checkpoint_row=row).summary()
        if summary:
            self.notice(summary)

    def _trained_learners(self) -> dict[str, Learner]:
        """The learners a checkpoint holds, by role (one when one model plays both roles)."""
        if self.shared:
            return {"coder": self.models.coder_learner}
        return {"coder": self.models.coder_learner, "tester": self.models.tester_learner}

    def _trainer_state(self, step: int, metrics: dict[str, Any] | None = None) -> TrainerState:
        return TrainerState(step=step, sampler=self.sampler.state(), rng=capture_rng(), metrics=metrics)

    def _save_checkpoint(self, state: TrainerState) -> Path:
        book = self.run_dir / BOOK_FILE if self.book is not None and self.book.enabled else None
        return save_checkpoint(
            self.run_dir, state, self.cfg, self._trained_learners(), book, self.cfg.train.keep_last
        )
