"""``codea1 data screen``: sample a model on a problem set, score every sample with the golden
tests (the problems' harnesses), and keep the problems whose pass rate lies in a band.

It is ``eval code`` with one more output: the per-problem pass rates go to the results file in
``--results-dir`` (resumable: problems already screened are not sampled again) and the problems in
the band ``--keep LO:HI`` are written to ``--output`` in our JSONL format (``data.train`` reads
it). Groups whose samples all get the same reward carry no gradient, so training on the band is
training on the problems that can teach the model something.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from codea1.cli import CliError
from codea1.cli.eval_args import add_common_options, check_options, per_chunk, run_options, sampling
from codea1.cli.outputs import OutputFile, check_output
from codea1.data.screen import in_band, parse_band, pass_rates
from codea1.eval import runner
from codea1.eval.code_eval import code_checker, sample_completions, sampling_settings


def add_parser(verbs: Any) -> None:
    """Add ``data screen`` to the ``data`` verbs."""
    screen = verbs.add_parser("screen", help="keep the problems a model solves sometimes (a pass-rate band)")
    add_common_options(screen)
    screen.add_argument("--model", required=True, help="model spec (hub id, directory, .gguf, smollm2-135m)")
    screen.add_argument("--n", type=int, default=8, help="samples per problem")
    screen.add_argument("--keep", default="0.1:0.9", help="pass-rate band to keep, LO:HI (inclusive)")
    screen.set_defaults(func=run_screen, temperature=1.0, top_p=1.0)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_screen(args: argparse.Namespace) -> int:
    """Screen, write the band's problems, print the pass-rate histogram."""
    if args.output is None:
        raise CliError("give --output FILE.jsonl: where the problems in the band go")
    try:
        lo, hi = parse_band(args.keep)
    except ValueError as e:
        raise CliError(f"--keep: {e}") from None
    check_options(args)
    if not 1 <= args.n <= 1024:
        raise CliError(f"--n must be in [1, 1024], got {args.n}")
    check_output(str(args.output))  # OutputFile needs the directory (check_options creates none)
    try:
        problems = runner.load_benchmark(args.data, args.limit, _say)
        runner.require_harness(problems, "screening scores every sample with it")
        params = sampling(args, args.n)

        def prepare() -> runner.CheckChunk:
            return code_checker(per_chunk(args.model, args, {}, sample_completions, params))

        records, path = runner.run_resumable(
            problems, "code", args.model, sampling_settings(params), run_options(args), prepare, _say
        )
    except runner.ResultsFileError as e:
        raise CliError(f"{e} (use another --results-dir)") from None
    except runner.EvalInputError as e:
        raise CliError(str(e)) from None
    rates = pass_rates(records)
    kept = set(in_band(rates, lo, hi))
    with OutputFile(str(args.output)) as out:
        for p in problems:
            if p.id in kept:
                out.stream.write(
                    json.dumps({**p.to_dict(), "metadata": {**p.metadata, "pass_rate": rates[p.id]}}) + "\n"
                )
        out.commit()
    never = sum(r == 0.0 for r in rates.values())
    always = sum(r == 1.0 for r in rates.values())
    print(f"screened {len(problems)} problems with {args.model} (n={args.n}, T={args.temperature:g}): "
          f"{never} never solved, {always} always solved, {len(kept)} in [{lo:g}, {hi:g}] written to "
          f"{args.output} (per-problem rates: {path})")  # fmt: skip
    return 0
