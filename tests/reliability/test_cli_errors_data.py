"""``codea1 data validate|inspect`` on paths that are not problem files, missing and unknown columns,
and KodCode without a reachable hub: one line each, saying what is wrong."""

from __future__ import annotations

import json
import socket
import sys
import types
from pathlib import Path

import pytest

from codea1.data import hub
from codea1.data.problems import DataError, load_problems

from .reliability_cli import (
    Place,
    assert_one_line_error,
    assert_untouched,
    place_fixture,  # noqa: F401 - the `place` fixture
    run_cli,
    run_process,
    tree,
)

ROW = {
    "id": "p/1",
    "question": "def neg(x):\n    'Minus x.'\n",
    "entry_point": "neg",
    "reference": "def neg(x):\n    return -x\n",
}


def _file(place: Place, rows: list[dict]) -> Path:
    path = place.data / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("verb", ["validate", "inspect"])
def test_a_directory_is_named_a_directory(
    place: Place, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    line = assert_one_line_error(run_cli(["data", verb, place.data], capsys), "is a directory")
    assert "no such file" not in line
    assert_untouched(place, {})


def test_dev_null_is_not_a_regular_file(capsys: pytest.CaptureFixture[str]) -> None:
    line = assert_one_line_error(run_cli(["data", "validate", "/dev/null"], capsys), "not a regular file")
    assert "no such file" not in line


def test_a_missing_file_is_still_no_such_file(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_error(run_cli(["data", "validate", place.data / "absent.jsonl"], capsys), "no such file")


def test_one_row_without_reference_names_the_column(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(place, [{k: v for k, v in ROW.items() if k != "reference"}])
    before = tree(place.data)
    line = assert_one_line_error(run_cli(["data", "validate", path], capsys), "missing column 'reference'")
    assert "unrecognised" not in line
    assert_untouched(place, before)


def test_a_renamed_column_is_named_with_its_likely_meaning(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    renamed = {**{k: v for k, v in ROW.items() if k != "reference"}, "references": ROW["reference"]}
    path = _file(place, [renamed])
    assert_one_line_error(
        run_cli(["data", "validate", path], capsys), "rename 'reference' (found 'references'?)"
    )


def test_later_rows_with_the_column_make_the_first_an_invalid_row(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(place, [{k: v for k, v in ROW.items() if k != "reference"}, {**ROW, "id": "p/2"}])
    outcome = run_cli(["data", "validate", path], capsys)
    assert outcome.code == 1 and "Traceback" not in outcome.err
    assert "row 1 (id 'p/1'): field 'reference': missing" in outcome.out


def test_unknown_columns_warn_with_the_nearest_known_name(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(place, [{**ROW, "tests": ["assert neg(1) == -1"], "entrypoint": "neg", "zzz": 1}])
    before = tree(place.data)
    outcome = run_cli(["data", "validate", path], capsys)
    assert outcome.code == 0 and outcome.err == ""
    warnings = [line for line in outcome.out.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {path}: unknown column 'entrypoint' (did you mean 'entry_point'?) is ignored",
        f"warning: {path}: unknown column 'tests' (did you mean 'golden_tests'?) is ignored",
        f"warning: {path}: unknown column 'zzz' is ignored",
    ]
    assert outcome.out.splitlines()[-1] == "1 problems (1 (no source)), 0 invalid"
    assert_untouched(place, before)


def test_limit_below_zero_is_refused(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(place, [ROW])
    assert_one_line_error(
        run_cli(["data", "validate", path, "--limit", "-1"], capsys), "--limit must be >= 0"
    )


# --------------------------------------------------------------------------------------------------
# KodCode without the hub: fail at once, never wait on datasets' retries
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_datasets(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """A stand-in ``datasets`` module whose ``load_dataset`` records its calls and fails like an
    offline hub; returns the list of calls."""
    calls: list[tuple] = []

    def load_dataset(*args: object, **kwargs: object) -> None:
        calls.append((args, kwargs))
        raise ConnectionError("offline mode is enabled and the dataset is not cached")

    fake = types.ModuleType("datasets")
    fake.load_dataset = load_dataset  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", fake)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return calls


def test_unknown_difficulty_fails_before_any_network(
    fake_datasets: list[tuple], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_probe() -> str:
        raise AssertionError("the hub was probed for a difficulty that cannot exist")

    monkeypatch.setattr(hub, "hub_unreachable", no_probe)
    line = assert_one_line_error(run_cli(["data", "validate", "kodcode:bogus"], capsys), "'bogus'")
    assert "easy|medium|hard|all" in line and fake_datasets == []


def test_unreachable_hub_fails_without_calling_datasets(
    fake_datasets: list[tuple], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(hub, "hub_unreachable", lambda: "huggingface.co:443: Network is unreachable")
    line = assert_one_line_error(run_cli(["data", "validate", "kodcode:hard"], capsys), "unreachable")
    assert "HF_HUB_OFFLINE=1" in line and fake_datasets == []


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_offline_mode_skips_the_probe_and_reads_the_cache(
    fake_datasets: list[tuple], monkeypatch: pytest.MonkeyPatch, var: str
) -> None:
    def no_probe() -> str:
        raise AssertionError("offline mode must not touch the network")

    monkeypatch.setattr(hub, "hub_unreachable", no_probe)
    monkeypatch.setenv(var, "1")
    with pytest.raises(DataError, match="cannot load KodCode/KodCode-V1 through datasets"):
        load_problems("kodcode")
    assert len(fake_datasets) == 1  # straight to the local cache


def test_probe_reports_a_closed_port(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nothing listens on: bound, then closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for var in ("HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    why = hub.hub_unreachable(timeout_s=5.0)
    assert why is not None and f"127.0.0.1:{port}" in why
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{s.getsockname()[1]}")
        assert hub.hub_unreachable(timeout_s=5.0) is None


def test_a_subprocess_run_on_a_directory(place: Place) -> None:
    outcome = run_process(["data", "validate", place.data], place.cwd, tmpdir=place.tmp)
    assert_one_line_error(outcome, "is a directory")
    assert_untouched(place, {})


def test_inspect_with_no_tests_asked_is_refused(place: Place, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(place, [ROW])
    outcome = run_cli(["data", "inspect", path, "--n-tests", "0"], capsys)
    assert_one_line_error(outcome, "--n-tests must be in [1, 64], got 0")


def test_a_leading_byte_order_mark_is_not_a_bad_row(tmp_path: Path) -> None:
    """Editors on some systems start a UTF-8 file with a BOM: the first row still loads."""
    from codea1.results_file import read_jsonl

    path = tmp_path / "problems.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf" + (json.dumps(ROW) + "\n" + json.dumps({**ROW, "id": "p/2"}) + "\n").encode()
    )
    assert [p.id for p in load_problems(str(path))] == ["p/1", "p/2"]
    assert [r["id"] for r in read_jsonl(path)] == ["p/1", "p/2"]


def test_screen_with_no_such_model_is_one_line_before_anything_starts(
    place: Place, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35, item 6: ``data screen --model ./nosuch`` was an uncaught ``ModelLoadError``."""
    argv = ["data", "screen", "--data", "demo:heldout", "--model", "./nosuch", "--output", place.out / "k.jsonl",
            "--results-dir", place.out / "res", "--cache-dir", place.out / "cache"]  # fmt: skip
    assert_one_line_error(run_cli(argv, capsys), "--model ./nosuch", "not found")
    assert_untouched(place, {})


def test_screen_with_a_hub_id_that_cannot_be_reached_is_one_line(
    place: Place, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub id is only tried when loaded; offline, the loader's (multi-line) reason becomes one line."""
    from codea1.engine import hf_local
    from codea1.engine.loading import ModelLoadError

    def offline(spec: str, *_: object) -> None:
        raise ModelLoadError(f"could not load a tokenizer from {spec}: OSError: We couldn't connect to "
                             "'https://huggingface.co'.\nCheck your internet connection.")  # fmt: skip

    monkeypatch.setattr(hf_local, "load_policy", offline)
    argv = ["data", "screen", "--data", "demo:heldout", "--limit", "1", "--model", "nosuchorg/nosuchmodel",
            "--output", place.out / "k.jsonl", "--results-dir", place.out / "res", "--cache-dir",
            place.out / "cache", "--workers", "1"]  # fmt: skip
    outcome = run_cli(argv, capsys)
    assert_one_line_error(outcome, "--model nosuchorg/nosuchmodel: could not load", "internet", alone=False)
    assert not (place.out / "k.jsonl").exists()


def test_a_checkpoint_role_directory_passes_the_model_check(tmp_path: Path) -> None:
    """A role directory of a training checkpoint has no config.json (its base model is named in
    ``config.yaml`` one level up) and is a model ``eval --model`` loads; a bare weights file is not."""
    from codea1.cli import CliError
    from codea1.cli.eval_args import check_model

    role = tmp_path / "checkpoints" / "step_000001" / "coder"
    role.mkdir(parents=True)
    (role / "weights.safetensors").write_bytes(b"")
    with pytest.raises(CliError, match="no config.json"):
        check_model(str(role))
    (role.parent / "config.yaml").write_text("engine: {}\n")
    check_model(str(role))
