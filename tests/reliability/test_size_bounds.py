"""Every size a user can set is bounded (issue 26, part 2): a worker count by this machine's cores, a
group size, batch, token count or test count by ``codea1.limits``. A size past its bound is one
``codea1: error:`` line with exit 2, before anything is started or created: no sandbox, no run
directory, no output, the inputs byte-identical."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from codea1.config import ConfigError, load_config
from codea1.limits import MAX_COMPLETIONS_PER_STEP, MAX_TRAIN_STEPS, max_workers

from .reliability_cli import (
    FIXTURES,
    Place,
    assert_one_line_error,
    assert_untouched,
    place_fixture,  # noqa: F401 - the `place` fixture
    run_cli,
    tree,
)
from .run_dirs import FAST

JOB = {"id": "neg", "reference": "def f(x):\n    return -x\n", "entry_point": "f",
       "codes": ["def f(x):\n    return -x\n"], "tests": [{"call": "f(2)", "predicted": "-2"}]}  # fmt: skip
WORKED = (FIXTURES / "score" / "worked_example.jsonl").read_bytes().splitlines()[0]
TOO_MANY = max_workers() + 1
"""One worker more than this machine allows (a harmless count, should the bound ever be lost)."""


def _file(place: Place, name: str, lines: list[bytes]) -> Path:
    path = place.data / name
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("verb", "needle"),
    [
        (["sandbox", "run", "--workers", str(TOO_MANY)], f"--workers must be in [0, {max_workers()}]"),
        (["sandbox", "run", "--batch", "70000"], "--batch must be at most 65536"),
        (["score", "--workers", str(TOO_MANY)], f"--workers must be in [0, {max_workers()}]"),
    ],
)
def test_batch_verbs_bound_workers_and_batches(
    place: Place, capsys: pytest.CaptureFixture[str], verb: list[str], needle: str
) -> None:
    lines = [json.dumps(JOB).encode()] if verb[0] == "sandbox" else [WORKED]
    src = _file(place, "in.jsonl", lines)
    before = tree(place.data)
    outcome = run_cli([*verb, "--input", src, "--output", place.out / "r.jsonl"], capsys)
    line = assert_one_line_error(outcome, needle)
    assert "per core" in line or "--batch" in line
    assert_untouched(place, before)


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (["--n", "100000"], "--n must be at most 1024"),
        (["--max-new-tokens", "1000000000"], "--max-new-tokens must be at most 131072"),
        (["--chunk", "1000000"], "--chunk must be at most 65536"),
        (["--workers", str(TOO_MANY)], f"--workers must be in [0, {max_workers()}]"),
    ],
)
def test_eval_bounds_its_sizes(
    place: Place, capsys: pytest.CaptureFixture[str], option: list[str], needle: str
) -> None:
    samples = _file(
        place, "samples.jsonl", [b'{"id": "fx/clamp", "completion": "def clamp(x, lo, hi): return x"}']
    )
    before = tree(place.data)
    argv = ["eval", "code", "--data", FIXTURES / "eval" / "problems.jsonl", "--samples", samples,
            "--cache-dir", place.out / "cache", "--output", place.out / "m.json", *option]  # fmt: skip
    assert_one_line_error(run_cli(argv, capsys), needle)
    assert_untouched(place, before)


def test_eval_bon_bounds_suites(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    samples = _file(place, "samples.jsonl", [b'{"id": "fx/clamp", "completion": "x"}'])
    tests = _file(place, "tests.jsonl", [b'{"id": "fx/clamp", "tests": ["assert clamp(1, 0, 2) == 1"]}'])
    before = tree(place.data)
    for option, needle in ((["--m", "100000"], "--m must be at most 256"),
                           (["--tests-per-suite", "1000"], "--tests-per-suite must be at most 64")):  # fmt: skip
        argv = ["eval", "bon", "--data", FIXTURES / "eval" / "problems.jsonl", "--samples", samples,
                "--tests", tests, "--cache-dir", place.out / "cache", *option]  # fmt: skip
        assert_one_line_error(run_cli(argv, capsys), needle)
    assert_untouched(place, before)


def test_data_inspect_bounds_the_tests_asked_for(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = run_cli(["data", "inspect", "demo:train", "--n-tests", "100000"], capsys)
    assert_one_line_error(outcome, "--n-tests must be in [1, 64]")
    assert_untouched(place, {})


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("coder.sampling.n=1000000000000", "coder.sampling.n=1000000000000 exceeds the maximum 256"),
        ("tester.sampling.n=257", "tester.sampling.n=257 exceeds the maximum 256"),
        ("coder.sampling.batch_size=100000", "coder.sampling.batch_size=100000 exceeds the maximum 4096"),
        ("coder.sampling.max_new_tokens=200000", "coder.sampling.max_new_tokens=200000 exceeds the maximum"),
        ("tester.sampling.max_prompt_tokens=10000000", "tester.sampling.max_prompt_tokens=10000000 exceeds"),
        ("coder.optim.micro_batch_size=5000", "coder.optim.micro_batch_size=5000 exceeds the maximum 4096"),
        ("tester.optim.ppo_epochs=5000", "tester.optim.ppo_epochs=5000 exceeds the maximum 1024"),
        ("tester.tests_per_suite=65", "tester.tests_per_suite=65 exceeds the maximum 64"),
        ("tester.tests_per_suite=0", "tester.tests_per_suite must be >= 1"),
        ("mistake_book.top_k=100000", "mistake_book.top_k=100000 exceeds the maximum 1024"),
        ("sandbox.workers=100000", "sandbox.workers=100000 exceeds the maximum 1024"),
        (f"sandbox.workers={TOO_MANY}", f"sandbox.workers must be in [0, {max_workers()}]"),
    ],
)
def test_train_bounds_every_size_before_the_run_dir(
    place: Place, capsys: pytest.CaptureFixture[str], override: str, needle: str
) -> None:
    run = place.out / "run"
    outcome = run_cli(["train", *FAST, "--steps", "1", "--run-dir", run, "--set", override], capsys)
    line = assert_one_line_error(outcome, needle)
    assert "presets" not in line  # the override is at fault, not the preset
    assert not run.exists()
    assert_untouched(place, {})


def test_train_bounds_the_completions_of_a_step(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    run = place.out / "run"
    sizes = ["data.problems_per_step=4096", "coder.sampling.n=16", "tester.sampling.n=16"]
    outcome = run_cli(["train", *FAST, "--run-dir", run, *[a for s in sizes for a in ("--set", s)]], capsys)
    assert_one_line_error(
        outcome, "a step would sample 1,114,112 completions", f"{MAX_COMPLETIONS_PER_STEP:,}"
    )
    assert not run.exists()
    assert_untouched(place, {})


@pytest.mark.parametrize(
    ("override", "needle"),
    [("eval.n=5000", "eval.n=5000 exceeds the maximum 1024"),
     ("eval.chunk=100000", "eval.chunk=100000 exceeds the maximum 65536")],
)  # fmt: skip
def test_train_bounds_the_in_run_evaluation(
    place: Place, capsys: pytest.CaptureFixture[str], override: str, needle: str
) -> None:
    run = place.out / "run"
    argv = ["train", *FAST, "--steps", "1", "--run-dir", run, "--set", "eval.data=demo:heldout",
            "--set", "eval.limit=2", "--set", override]  # fmt: skip
    assert_one_line_error(run_cli(argv, capsys), needle)
    assert not run.exists()
    assert_untouched(place, {})


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        (f"train.steps={10**30}", f"train.steps={10**30} exceeds the maximum {MAX_TRAIN_STEPS}"),
        (f"eval.every={MAX_TRAIN_STEPS + 1}", f"eval.every={MAX_TRAIN_STEPS + 1} exceeds the maximum"),
        ("eval.every=-1", "eval.every must be >= 0"),
    ],
)
def test_train_bounds_its_steps_before_the_run_dir(
    place: Place, capsys: pytest.CaptureFixture[str], override: str, needle: str
) -> None:
    """Issue 35, item 8: ``--steps 10**30`` created the run directory and ran until killed, and a
    negative ``eval.every`` was accepted (it was checked only with ``eval.data`` set)."""
    with pytest.raises(ConfigError, match=re.escape(needle)):  # first, so that a lost bound fails fast
        load_config("tiny-cpu", [override])
    run = place.out / "run"
    key, value = override.split("=")
    given = ["--steps", value] if key == "train.steps" else ["--steps", "1", "--set", override]
    assert_one_line_error(run_cli(["train", *FAST, "--run-dir", run, *given], capsys), needle)
    assert not run.exists()
    assert_untouched(place, {})
