"""How far a learning rate moves the policy in tens of steps: the measurement behind a preset's lr.

One fixed batch, sampled once from the base model: ``--problems`` problems of ``--data``, ``--n``
completions each, scored with the golden tests (the coder's reward of the Golden-Tests method), GRPO
advantages within each problem. Then, for each learning rate, a fresh learner (the preset's, LoRA in
``adapters`` mode) takes ``--steps`` optimizer steps on that batch with the run's loss, and after
each step the probe recomputes the batch's log-probs and prints

* ``push``: the advantage-weighted change of the mean per-token log-prob since step 0,
  ``sum_i A_i (lp_i(t) - lp_i(0)) / sum_i |A_i|`` (nats/token): how much more likely the better
  completions became relative to the worse ones;
* ``kl``: ``mean over tokens of lp(0) - lp(t)``, an estimate of KL(pi_0 || pi_t) per token on the
  samples of pi_0: how far the policy moved overall.

A rate that cannot move the policy in tens of steps has ``push`` near 0 at the last step; one that is
too large moves ``kl`` far beyond ``push`` (the format breaks before the preferences move). The
rule the presets use: the largest rate whose ``kl`` after ``--steps`` steps stays below ``--kl-max``
(0.1 nats/token by default), reported as "chosen". The batch is on-policy only at step 0: this
measures the step size of the optimizer on real data, not a training run.

Usage (slow, minutes; run it alone, nothing else on the CPU):
``python benchmarks/lr_probe.py --preset tiny-cpu --data demo:easy-train --problems 2 --n 8
--lrs 1e-5,3e-5,1e-4,3e-4 --steps 10 [--set engine.mode=adapters ...]``
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Sequence

import numpy as np


def parse_lrs(text: str) -> list[float]:
    """``"1e-5,3e-5"`` -> ``[1e-5, 3e-5]``; every rate positive, at least one."""
    try:
        lrs = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"lr_probe: --lrs must be comma-separated numbers, got {text!r}") from None
    if not lrs or any(not (lr > 0 and math.isfinite(lr)) for lr in lrs):
        raise SystemExit(f"lr_probe: --lrs needs positive finite rates, got {text!r}")
    return lrs


def movement(
    lp0: Sequence[Sequence[float]], lpt: Sequence[Sequence[float]], advantages: Sequence[float]
) -> tuple[float, float]:
    """``(push, kl)`` of the module docstring from per-token log-probs at step 0 and now."""
    mean0 = np.array([np.mean(x) for x in lp0])
    meant = np.array([np.mean(x) for x in lpt])
    adv = np.asarray(advantages, dtype=np.float64)
    weight = np.abs(adv).sum()
    push = float((adv * (meant - mean0)).sum() / weight) if weight > 0 else 0.0
    diffs = np.concatenate([np.asarray(a) - np.asarray(b) for a, b in zip(lp0, lpt, strict=True)])
    return push, float(diffs.mean())


def chosen_rate(final_kl: dict[float, float], kl_max: float) -> float | None:
    """The largest rate whose last-step ``kl`` is below ``kl_max`` (None when none is)."""
    ok = [lr for lr, kl in final_kl.items() if kl < kl_max]
    return max(ok) if ok else None


def fixed_batch(cfg, n_problems: int):  # noqa: ANN001, ANN201
    """The probe's batch: the base model's completions for the first problems, golden rewards,
    GRPO advantages (a :class:`~codea1.rollout.RoleBatch`), and the reward mean."""
    from codea1 import rollout as ro
    from codea1.core.seeds import call_seed
    from codea1.data.problems import load_problems
    from codea1.engine.build import build
    from codea1.sandbox.local import Sandbox
    from codea1.scoring import score_golden
    from codea1.trainer import sampling_params

    problems = load_problems(cfg.data.train)[:n_problems]
    roles = build(cfg)
    try:
        prompts, _ = ro.coder_prompts(problems, roles.coder_policy, cfg.coder.sampling.max_prompt_tokens)
        params = sampling_params(cfg.coder.sampling, call_seed(cfg.train.seed, 1, "coder"))
        groups = ro.sample(roles.coder_policy, prompts, params)
        codes = ro.extract_codes(problems, prompts, groups)
        rollout = ro.assemble(problems, prompts, codes, [], [], [])
        with Sandbox(cfg.sandbox) as sandbox:
            scores = score_golden(ro.scoring_items(rollout), sandbox, reward=cfg.reward)
        batch, _ = ro.training_batch(ro.coder_samples(rollout, scores))
    finally:
        roles.close()
    return batch


def probe_rate(cfg, lr: float, batch, steps: int) -> list[tuple[float, float]]:  # noqa: ANN001
    """``(push, kl)`` after each of ``steps`` optimizer steps at ``lr`` from the base weights."""
    from codea1.engine.build import build
    from codea1.scoring import bind_policy_loss

    optim = dataclasses.replace(cfg.coder.optim, lr=lr, warmup_steps=0, min_lr_ratio=1.0)
    run = dataclasses.replace(cfg, coder=dataclasses.replace(cfg.coder, optim=optim))
    roles = build(run, rollout="transformers")
    try:
        learner, loss_fn = roles.coder_learner, bind_policy_loss(cfg.loss)
        tb = batch.train
        tb.old_logprobs = learner.logprobs(tb)
        if cfg.loss.keeps_reference:
            tb.ref_logprobs = learner.logprobs(tb, reference=True)
        lp0 = tb.old_logprobs
        out = []
        for _ in range(steps):
            learner.train_step(tb, loss_fn)
            out.append(movement(lp0, learner.logprobs(tb), tb.advantages))
        return out
    finally:
        roles.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Print the probe's table for each rate, then the chosen rate."""
    from codea1.cli import CliError
    from codea1.cli.train import expand_model_paths
    from codea1.config import ConfigError, load_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-cpu")
    ap.add_argument("--data", default="demo:easy-train")
    ap.add_argument("--problems", type=int, default=2)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--lrs", default="1e-5,3e-5,1e-4,3e-4")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--kl-max", type=float, default=0.1)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args(argv)
    lrs = parse_lrs(args.lrs)
    if args.problems < 1 or args.n < 2 or args.steps < 1:
        raise SystemExit("lr_probe: --problems >= 1, --n >= 2 and --steps >= 1")
    try:
        cfg = load_config(
            args.preset,
            [*args.overrides, f"data.train={args.data}", f"coder.sampling.n={args.n}", "train.method=golden"],
        )
        expand_model_paths(cfg)  # ${CODEA1_QWEN_MODEL} and the like, as codea1 train does
    except (ConfigError, CliError) as e:
        raise SystemExit(f"lr_probe: {e}") from None
    # golden: one model plays both roles, so the tester's sampling temperature must be the coder's
    tester_sampling = dataclasses.replace(cfg.tester.sampling, temperature=cfg.coder.sampling.temperature)
    cfg = dataclasses.replace(cfg, tester=dataclasses.replace(cfg.tester, sampling=tester_sampling))
    start = time.perf_counter()
    batch = fixed_batch(cfg, args.problems)
    rewards = np.asarray(batch.rewards)
    print(
        f"batch: {len(batch)} completions of {args.problems} problems ({args.data}), reward mean "
        f"{rewards.mean():.3f}, non-zero advantages {sum(a != 0 for a in batch.train.advantages)}; "
        f"model {cfg.engine.coder_model}, mode {cfg.engine.mode}, sampled in {time.perf_counter() - start:.0f} s"
    )
    if not any(batch.train.advantages):
        raise SystemExit("lr_probe: every group had equal rewards; pick other problems or a larger --n")
    final = {}
    print(f"{'lr':>9} | " + " | ".join(f"step {s:>2} push / kl" for s in range(1, args.steps + 1)))
    for lr in lrs:
        rows = probe_rate(cfg, lr, batch, args.steps)
        final[lr] = rows[-1][1]
        print(f"{lr:>9.1e} | " + " | ".join(f"{p:+.3f} / {k:.3f}" for p, k in rows))
    pick = chosen_rate(final, args.kl_max)
    print(f"chosen (largest lr with kl < {args.kl_max} after {args.steps} steps): {pick if pick else 'none'}")
    print(f"wall {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except SystemExit as stop:  # a refused argument: its one line, and exit status 2
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
            raise SystemExit(2) from None
        raise
