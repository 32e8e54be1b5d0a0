"""`codea1 eval code --samples`: exact avg@k / pass@k on hand-built files, 100 on references."""

import json
import random
from pathlib import Path

import pytest

from codea1.cli import main

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "eval"
PARQUET = REPO.parent / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"

RIGHT = {
    "fx/clamp": "```python\ndef clamp(x, lo, hi):\n    return min(max(x, lo), hi)\n```",
    "fx/fizz": "Here:\n```python\ndef fizz(n):\n    s = ('Fizz' if n % 3 == 0 else '') + ('Buzz' if n % 5 == 0 else '')\n    return s or str(n)\n```",
    "fx/vowels": "```python\ndef count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n```",
}
WRONG = {
    "fx/clamp": "```python\ndef clamp(x, lo, hi):\n    return max(x, lo)\n```",
    "fx/fizz": "```python\ndef fizz(n):\n    return str(n)\n```",
    "fx/vowels": "```python\ndef count_vowels(s):\n    return sum(c in 'aeiou' for c in s)\n```",
}
NO_CODE = "I cannot solve this."


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(tmp_path: Path, data: str, samples: Path, *extra: str) -> dict:
    out = tmp_path / "metrics.json"
    argv = ["eval", "code", "--data", data, "--samples", str(samples), "--output", str(out)]
    argv += [
        "--results-dir",
        str(tmp_path / "results"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--workers",
        "2",
    ]
    assert main([*argv, *extra]) == 0
    return json.loads(out.read_text())


def test_mixed_samples_give_hand_computed_metrics(tmp_path, capsys):
    # clamp: 3 of 8 correct, the first one wrong; fizz: 0 of 8 (one without code); vowels: 8 of 8.
    clamp = [WRONG, RIGHT, WRONG, RIGHT, WRONG, WRONG, RIGHT, WRONG]
    rows = [{"id": "fx/clamp", "completion": d["fx/clamp"]} for d in clamp]
    rows += [{"id": "fx/fizz", "completion": WRONG["fx/fizz"]} for _ in range(7)]
    rows += [{"id": "fx/fizz", "completion": NO_CODE}]
    rows += [{"id": "fx/vowels", "completion": RIGHT["fx/vowels"]} for _ in range(7)]
    rows += [{"id": "fx/vowels", "solution": RIGHT["fx/vowels"].strip("`\npython")}]
    samples = _write(tmp_path / "mixed.jsonl", rows)
    metrics = _run(tmp_path, str(FIXTURES / "problems.jsonl"), samples)
    # benchA = clamp + fizz: pass@1 = (3/8 + 0)/2, pass@8 = (1 + 0)/2, avg@1 = 0, avg@8 = pass@1.
    assert metrics["benchA"]["pass@1"] == pytest.approx(18.75)
    assert metrics["benchA"]["pass@8"] == pytest.approx(50.0)
    assert metrics["benchA"]["avg@1"] == pytest.approx(0.0)
    assert metrics["benchA"]["avg@8"] == pytest.approx(18.75)
    assert metrics["benchB"]["pass@1"] == metrics["benchB"]["avg@8"] == pytest.approx(100.0)
    assert metrics["all"]["pass@1"] == pytest.approx(100 * (3 / 8 + 0 + 1) / 3)
    assert metrics["all"]["avg@1"] == pytest.approx(100 / 3)
    assert "pass@16" not in metrics["all"]
    table = capsys.readouterr().out
    assert "benchA" in table and "pass@8" in table

    # Resumable: the results file is reused (a second run checks nothing and reports the same).
    results = list((tmp_path / "results").glob("code-*.jsonl"))
    assert len(results) == 1 and len(results[0].read_text().splitlines()) == 4
    assert _run(tmp_path, str(FIXTURES / "problems.jsonl"), samples) == metrics


def test_wrong_samples_score_zero(tmp_path):
    samples = _write(tmp_path / "wrong.jsonl", [{"id": k, "completion": v} for k, v in WRONG.items()])
    metrics = _run(tmp_path, str(FIXTURES / "problems.jsonl"), samples)
    assert metrics["all"]["pass@1"] == 0.0 and metrics["all"]["avg@1"] == 0.0


@pytest.mark.slow
def test_references_of_the_shared_parquet_score_100_and_wrong_ones_0(tmp_path):
    if not PARQUET.exists():
        pytest.skip("shared benchmark parquet not found at <repo>/../shared/data")
    from codea1.data.problems import load_problems

    problems = load_problems(str(PARQUET))
    rng = random.Random(0)
    by_source: dict[str, list] = {}
    for p in problems:
        by_source.setdefault(p.source, []).append(p)
    picked = [p for p in problems if p.id in ("HumanEval/32", "MBPP/56")]
    for rows in by_source.values():
        picked += rng.sample([p for p in rows if p not in picked], 12)
    solutions = _write(tmp_path / "refs.jsonl", [{"id": p.id, "solution": p.reference} for p in picked])
    metrics = _run(tmp_path, str(PARQUET), solutions)
    assert metrics["humanevalplus"]["pass@1"] == 100.0
    assert metrics["mbppplus"]["pass@1"] == 100.0
    wrong = [
        {
            "id": p.id,
            "completion": f"```python\ndef {p.entry_point}(*args, **kwargs):\n    raise ValueError\n```",
        }
        for p in picked
    ]
    metrics = _run(tmp_path, str(PARQUET), _write(tmp_path / "wrong.jsonl", wrong))
    assert metrics["humanevalplus"]["pass@1"] == 0.0 and metrics["mbppplus"]["pass@1"] == 0.0
