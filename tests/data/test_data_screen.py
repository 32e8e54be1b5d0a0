"""``codea1 data screen``: the pass-rate band, its argument checks, and a real screening run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.data.screen import in_band, parse_band, pass_rates


def test_band_parsing_and_selection() -> None:
    assert parse_band("0.1:0.9") == (0.1, 0.9)
    for bad in ("0.5", "a:b", "0.9:0.1", "-1:0.5", "0:2"):
        with pytest.raises(ValueError, match="band"):
            parse_band(bad)
    records = [{"id": "a", "correct": [True, False]}, {"id": "b", "correct": [False, False]},
               {"id": "c", "correct": [True, True]}, {"id": "d", "correct": []}]  # fmt: skip
    rates = pass_rates(records)
    assert rates == {"a": 0.5, "b": 0.0, "c": 1.0, "d": 0.0}
    assert in_band(rates, 0.1, 0.9) == ["a"] and in_band(rates, 0.0, 1.0) == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--keep", "0.9:0.1"], "--keep: band '0.9:0.1' must satisfy"),
        (["--n", "0"], "--n must be"),
        (["--n", "5000"], "--n must be at most 1024"),
        ([], "give --output FILE.jsonl"),
    ],
)
def test_bad_arguments_are_one_line_and_write_nothing(tmp_path: Path, capsys, extra, message) -> None:
    out = [] if message.startswith("give") else ["--output", str(tmp_path / "kept.jsonl")]
    args = ["data", "screen", "--model", "smollm2-135m", "--data", "demo:train", "--results-dir",
            str(tmp_path / "res"), *out, *extra]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.slow
def test_screening_a_real_model_writes_the_band_and_resumes(tmp_path: Path) -> None:
    from tests.tiny_model import make_tiny_model

    model = make_tiny_model(tmp_path / "model")
    kept = tmp_path / "kept.jsonl"
    args = ["data", "screen", "--model", str(model), "--data", "demo:train", "--limit", "3", "--n", "2",
            "--max-new-tokens", "16", "--keep", "0:1", "--results-dir", str(tmp_path / "res"),
            "--output", str(kept), "--device", "cpu"]  # fmt: skip
    assert main(args) == 0
    rows = [json.loads(line) for line in kept.read_text().splitlines()]
    assert len(rows) == 3 and all(0.0 <= r["metadata"]["pass_rate"] <= 1.0 for r in rows)
    assert main(["data", "validate", str(kept)]) == 0
    before = next((tmp_path / "res").iterdir()).read_text()
    assert main(args[:-2]) == 0  # resumed: every problem is in the results file, nothing is sampled
    assert next((tmp_path / "res").iterdir()).read_text() == before
