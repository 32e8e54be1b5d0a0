"""``codea1 compare`` and ``codea1 eval compare`` on outputs that are inputs, unbounded or negative
statistical settings, damaged run configurations and a run given twice (issue 45, items 8-11).

Each refusal is one ``codea1: error:`` line with exit 2, no traceback, and every file of the runs
stays byte for byte as it was.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.report.fake_runs import code_record, fake_run, suite_record

from .reliability_cli import assert_one_line_error, run_cli, tree

IDS = ["demo/easy_a", "demo/easy_b", "demo/easy_c"]


def _points(passed: int) -> dict[int, tuple[list, list]]:
    return {0: ([code_record(p, passed) for p in IDS], [suite_record(p, 2, 1) for p in IDS])}


@pytest.fixture(name="runs")
def runs_fixture(tmp_path: Path) -> tuple[Path, Path]:
    """Two runs of two methods (a1, golden), one evaluation point each."""
    a = fake_run(tmp_path, "a", _points(3), {"train.method": "a1"})
    b = fake_run(tmp_path, "b", _points(1), {"train.method": "golden"})
    return a, b


def _snapshot(root: Path) -> dict[str, str]:
    return tree(root)


def _refused(capsys: pytest.CaptureFixture[str], argv: list[object], root: Path, *needles: str) -> None:
    before = _snapshot(root)
    assert_one_line_error(run_cli([str(a) for a in argv], capsys), *needles)
    assert _snapshot(root) == before


def _results_file(run: Path) -> Path:
    return next((run / "eval").rglob("code-*.jsonl"))


def _symlink_to(target: Path) -> Path:
    link = target.parent.parent / f"link-{target.name}"
    link.symlink_to(target)
    return link


def _hardlink_to(target: Path) -> Path:
    link = target.parent.parent / f"hard-{target.name}"
    os.link(target, link)
    return link


OUTPUTS: dict[str, Callable[[Path], Path]] = {
    "eval.jsonl": lambda run: run / "eval.jsonl",
    "config.yaml": lambda run: run / "config.yaml",
    "results file": _results_file,
    "symlink to a results file": lambda run: _symlink_to(_results_file(run)),
    "hard link to config.yaml": lambda run: _hardlink_to(run / "config.yaml"),
}


@pytest.mark.parametrize("which", sorted(OUTPUTS))
def test_compare_output_that_is_an_input_is_refused(
    tmp_path: Path, runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], which: str
) -> None:
    """Item 8: ``--output a/eval.jsonl`` (or config.yaml, a results file, a link to one) overwrote it."""
    a, b = runs
    output = OUTPUTS[which](a)
    _refused(capsys, ["compare", a, b, "--output", output], tmp_path, "is the same file as", str(a))


def test_compare_output_that_is_the_training_problems_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The problems file ``data.train`` names is read too (to split training from held-out problems)."""
    problems = tmp_path / "train.jsonl"
    problems.write_text((Path(__file__).parents[2] / "codea1/data/demo/easy-train.jsonl").read_text())
    a = fake_run(tmp_path, "a", _points(3), {"train.method": "a1", "data.train": str(problems)})
    b = fake_run(tmp_path, "b", _points(1), {"train.method": "golden", "data.train": str(problems)})
    _refused(capsys, ["compare", a, b, "--output", problems], tmp_path, "is the same file as")


def test_compare_output_beside_the_runs_is_written(
    tmp_path: Path, runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: a new file, even inside a run directory, is an output like any other."""
    a, b = runs
    outcome = run_cli(
        ["compare", str(a), str(b), "--resamples", "50", "--output", str(a / "cmp.json")], capsys
    )
    assert outcome.code == 0, outcome.err
    assert (a / "cmp.json").is_file()


@pytest.mark.parametrize("verb", ["compare", "eval compare"])
@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (["--resamples", "1000000000000"], "--resamples must be in [1, 1,000,000]"),
        (["--resamples", "0"], "--resamples must be in [1, 1,000,000]"),
        (["--seed", "-1"], "--seed must be an integer in [0, 2**63 - 1], got -1"),
        (["--seed", str(2**64)], "--seed must be an integer in [0, 2**63 - 1]"),
    ],
)
def test_statistical_settings_are_bounded(
    tmp_path: Path, runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], verb: str,
    option: list[str], needle: str,
) -> None:  # fmt: skip
    """Item 9: ``--resamples 10**12`` asked for a 7.28 TiB array; ``--seed -1`` was a traceback in
    ``compare`` and an error without the option's name in ``eval compare``."""
    a, b = runs
    inputs = [a, b] if verb == "compare" else [_results_file(b), _results_file(a)]
    _refused(capsys, [*verb.split(), *inputs, *option, "--output", tmp_path / "out.json"], tmp_path, needle)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("train.seed", "x", "train.seed is 'x', not an integer"),
        ("eval.tests", "abc", "eval.tests is 'abc', not an integer"),
        ("data.limit", [1], "data.limit is '[1]', not an integer"),
        ("data.train", 3, "data.train is 3, not a string"),
    ],
)
def test_damaged_run_config_is_one_line(
    tmp_path: Path, runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], key: str, value: object,
    needle: str,
) -> None:  # fmt: skip
    """Item 10: a ``config.yaml`` with ``train.seed: x`` or ``eval.tests: abc`` was a traceback."""
    a, b = runs
    raw = yaml.safe_load((a / "config.yaml").read_text())
    section, field = key.split(".")
    raw[section][field] = value
    (a / "config.yaml").write_text(yaml.safe_dump(raw))
    _refused(capsys, ["compare", a, b], tmp_path, needle, str(a / "config.yaml"))


SPELLINGS: dict[str, Callable[[Path], Path]] = {
    "the same path": lambda run: run,
    "another spelling": lambda run: run / ".." / run.name,
    "a symlink": lambda run: _symlink_dir(run),
}


def _symlink_dir(run: Path) -> Path:
    link = run.parent / f"link-{run.name}"
    link.symlink_to(run, target_is_directory=True)
    return link


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_a_run_given_twice_is_refused(
    tmp_path: Path, runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], spelling: str
) -> None:
    """Item 11: ``codea1 compare a a b`` paired run a with itself (and counted it as two seeds)."""
    a, b = runs
    _refused(
        capsys, ["compare", a, SPELLINGS[spelling](a), b], tmp_path, "is given twice", "give each run once"
    )


def test_eval_compare_output_that_is_the_problems_file_is_refused(
    tmp_path: Path, runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``eval compare --problems FILE --output FILE`` would replace the problem file it reads."""
    a, b = runs
    problems = tmp_path / "subset.jsonl"
    problems.write_text((Path(__file__).parents[2] / "codea1/data/demo/easy-train.jsonl").read_text())
    argv = [
        "eval",
        "compare",
        _results_file(b),
        _results_file(a),
        "--problems",
        problems,
        "--output",
        problems,
    ]
    _refused(capsys, argv, tmp_path, "is the same file as --problems")
