"""``codea1 eval``: every argument is checked before a model is loaded, and a ULT data file is an
input that ``--output`` must not replace (issue 45, items 8 and 13)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.cli import CliError, eval_args
from codea1.cli import eval as eval_cli

from .reliability_cli import assert_one_line_error, run_cli, tree

MODEL_LOADED = "a model was loaded"


@pytest.fixture(name="model_dir")
def model_dir_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory that names a model (it has a config.json); loading any model fails loudly."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")

    def no_loading(spec: str, args: object) -> None:
        raise CliError(MODEL_LOADED)

    monkeypatch.setattr(eval_args, "load_model", no_loading)
    monkeypatch.setattr(eval_cli, "load_model", no_loading)
    return model


def _verbs(model: Path, out: Path) -> dict[str, list[str]]:
    common = ["--data", "demo:easy-heldout", "--limit", "1", "--workers", "1", "--results-dir", str(out / "res"),
              "--cache-dir", str(out / "cache")]  # fmt: skip
    return {
        "code": ["eval", "code", "--model", str(model), "--n", "1", *common],
        "tests": ["eval", "tests", "--model", str(model), "--protocol", "suite", *common],
        "bon": ["eval", "bon", "--coder", str(model), "--tester", str(model), *common],
        "bigcodebench": ["eval", "bigcodebench", "--model", str(model), "--out-dir", str(out / "bcb")],
    }


@pytest.mark.parametrize("verb", ["code", "tests", "bon", "bigcodebench"])
@pytest.mark.parametrize("engine", ["transformers", "vllm"])
def test_a_negative_seed_is_refused_before_a_model_loads(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str], verb: str, engine: str
) -> None:
    """Item 13: ``eval code --engine vllm --seed -1`` loaded the model before refusing the seed."""
    out = tmp_path / "out"
    argv = _verbs(model_dir, out)[verb] + ["--seed=-1"]
    if verb != "bigcodebench":
        argv += ["--engine", engine]
    elif engine == "vllm":
        pytest.skip("bigcodebench samples with transformers only")
    line = assert_one_line_error(run_cli(argv, capsys), "--seed must be an integer in [0, 2**63 - 1], got -1")
    assert MODEL_LOADED not in line
    assert not out.exists()


@pytest.mark.parametrize("option", [["--temperature=-1"], ["--top-p", "0"], ["--max-new-tokens", "0"]])
def test_bigcodebench_sampling_values_are_checked_before_a_model_loads(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    out = tmp_path / "out"
    argv = _verbs(model_dir, out)["bigcodebench"] + option
    line = assert_one_line_error(run_cli(argv, capsys), option[0].split("=")[0])
    assert MODEL_LOADED not in line
    assert not out.exists()


ULT_ROW = {
    "task_id": "ult/add", "func_name": "add", "code": "def add(a, b):\n    return a + b\n",
    "prompt": "Add two numbers.", "test_list": ["assert add(1, 2) == 3"],
}  # fmt: skip


@pytest.mark.parametrize("spelling", ["ult:{path}", "ult: {path}", "{path}"])
@pytest.mark.parametrize("alias", ["same", "symlink"])
def test_eval_tests_output_that_is_the_ult_data_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spelling: str, alias: str
) -> None:
    """Item 8: ``eval tests --data ult:u.json --output u.json`` replaced the ULT data file (a plain
    ``--data u.json`` was refused already)."""
    data = tmp_path / "data"
    data.mkdir()
    ult = data / "u.json"
    ult.write_text(json.dumps([ULT_ROW]))
    output = ult
    if alias == "symlink":
        output = tmp_path / "link.json"
        output.symlink_to(ult)
    before = tree(data)
    argv = ["eval", "tests", "--data", spelling.format(path=ult), "--example-tests", "--output", str(output),
            "--results-dir", str(tmp_path / "res"), "--cache-dir", str(tmp_path / "cache"), "--workers", "1"]  # fmt: skip
    assert_one_line_error(run_cli(argv, capsys), "is the same file as --data")
    assert tree(data) == before
    assert not (tmp_path / "res").exists() and not (tmp_path / "cache").exists()
