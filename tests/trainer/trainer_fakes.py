"""Helpers of the trainer tests: a few toy problems, the scripted roles of ``--engine scripted`` and
a runnable entry point for kill/interrupt tests in a separate process."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codea1.engine.base import Completion, SamplingParams

VOCAB = 256


def problems() -> list[Any]:
    """Four tiny problems with references and golden asserts."""
    from codea1.types import Problem

    specs = [
        ("add", "def add(a, b):\n    return a + b\n", ["assert add(1, 2) == 3", "assert add(0, 0) == 0",
                                                        "assert add(-1, 1) == 0", "assert add(5, 5) == 10"]),
        ("double", "def double(x):\n    return 2 * x\n", ["assert double(2) == 4", "assert double(0) == 0",
                                                           "assert double(-3) == -6", "assert double(7) == 14"]),
        ("first", "def first(xs):\n    return xs[0] if xs else None\n",
         ["assert first([1, 2]) == 1", "assert first([]) == None", "assert first([9]) == 9", "assert first([3, 4]) == 3"]),
        ("rev", "def rev(s):\n    return s[::-1]\n", ["assert rev('ab') == 'ba'", "assert rev('') == ''",
                                                         "assert rev('abc') == 'cba'", "assert rev('x') == 'x'"]),
    ]  # fmt: skip
    return [
        Problem(
            id=f"toy/{name}",
            question=f'def {name}(...):\n    """Solve the {name} task of problem {name}."""',
            entry_point=name,
            reference=ref,
            golden_tests=tuple(tests),
        )
        for name, ref, tests in specs
    ]


def build_models(probs: Sequence[Any], shared: bool = False) -> Any:
    """The roles ``codea1 train --engine scripted`` uses (the cli's script on the scripted engine)."""
    from codea1.engine.scripted_roles import scripted_roles

    return scripted_roles(probs, seed=0, shared=shared)


def main(argv: Sequence[str] | None = None) -> int:
    """``python trainer_fakes.py RUN_DIR STEPS [--resume] [--delay S]``: a whole run with the fakes
    in a process of its own (for kill/interrupt tests); the tester's rollouts sleep ``delay`` s."""
    import argparse
    import time

    from codea1.config import SandboxConfig, load_config
    from codea1.trainer import Trainer

    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("steps", type=int)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--delay", type=float, default=0.0)
    args = ap.parse_args(argv)
    cfg = load_config("tiny-cpu", [
        "engine.kind=scripted", "data.problems_per_step=2", "coder.sampling.n=4", "tester.sampling.n=3",
        "train.save_every=1", "tracking.tensorboard=false", "tracking.progress=plain", f"train.steps={args.steps}",
    ])  # fmt: skip
    probs = problems()
    models = build_models(probs)
    slow = models.tester_policy.generate

    def slow_generate(prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        print(f"tester rollout {models.tester_policy.calls + 1}", flush=True)
        time.sleep(args.delay)
        return slow(prompts, params)

    models.tester_policy.generate = slow_generate  # type: ignore[method-assign]
    from codea1.sandbox.local import Sandbox

    with Sandbox(SandboxConfig(workers=1)) as sb:
        summary = Trainer(cfg, models, probs, sb, Path(args.run_dir)).run(resume=args.resume)
    print(f"done step {summary.last_step}", flush=True)
    return 130 if summary.interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
