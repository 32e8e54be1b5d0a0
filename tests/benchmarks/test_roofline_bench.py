"""``benchmarks/roofline_bench.py``: its FLOP counts and its argument checks (the benchmark itself
loads models and is run by hand, docs/LOG.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codea1.engine.memory import ModelShape
from tests.benchmarks.benchmark_scripts import load_benchmark

rb = load_benchmark("roofline_bench")

TINY = ModelShape(name="t", layers=2, hidden=4, intermediate=8, heads=2, kv_heads=1, vocab=10, tied=True)


def test_a_forward_pass_counts_the_layers_the_attention_and_the_head_by_hand() -> None:
    # layer weights: q 16+4, k 4*2+2, v 4*2+2, o 16, gate/up/down 3*4*8, norms 2*4 -> 160 per layer
    assert TINY.layer_params == 160
    length = 3 + 2
    by_hand = 2 * 2 * 160 * length + 2 * 2 * 4 * length**2 + 2 * 10 * 4 * 2
    assert rb.prompt_group_flops(TINY, 3, [2], head=True) == by_hand
    assert rb.prompt_group_flops(TINY, 3, [2], head=False) == by_hand - 2 * 10 * 4 * 2


def test_a_shared_prompt_is_counted_once_per_micro_batch() -> None:
    one = rb.prompt_group_flops(TINY, 3, [2], head=True)
    shared = rb.prompt_group_flops(TINY, 3, [2, 2], head=True)
    # the second completion adds its own tokens and its attention to the prompt, not the prompt again
    second = 2 * 2 * 160 * 2 + 2 * 2 * 4 * (2 * 3 * 2 + 2**2) + 2 * 10 * 4 * 2
    assert shared == one + second
    prompts = [(1, 2, 3), (1, 2, 3), (4, 5, 6), (4, 5, 6)]
    assert rb.least_flops(TINY, prompts, [2, 2, 2, 2], 4) == 2 * shared
    # micro-batches of one sequence: every sequence pays for its prompt
    assert rb.least_flops(TINY, prompts, [2, 2, 2, 2], 1) == 4 * one


def test_an_update_is_three_forwards_two_with_lora_one_more_with_checkpointing() -> None:
    assert rb.update_factor(lora=False, checkpointing=False) == 3.0
    assert rb.update_factor(lora=True, checkpointing=False) == 2.0
    assert rb.update_factor(lora=True, checkpointing=True) == 3.0


def test_timed_takes_medians_and_names_the_threads_that_worked() -> None:
    calls = []
    row = rb.timed(lambda: calls.append(sum(range(200_000))), 3)
    assert len(calls) == 3
    assert row["seconds"] > 0 and row["cpu_s"] >= 0 and row["spread"] >= 1.0
    assert set(row) == {"seconds", "cpu_s", "sys_s", "faults", "spread", "threads"}
    assert all(isinstance(name, str) and sec > 0 for name, sec in row["threads"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engines", "tgi"], "--engines"),
        (["--engines", ","], "--engines"),
        (["--repeats", "0"], "at least 1"),
        (["--problems", "0"], "at least 1"),
        (["--set", "no.such_key=1"], "unknown key 'no'"),
        (["--preset", "no-such-preset"], "no-such-preset"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        rb.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err and "Traceback" not in err


def test_a_json_file_in_a_missing_directory_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        rb.parse_args(["--json", str(tmp_path / "missing" / "out.json")])
    assert "--json: no directory" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()


def _row(engine: str, seconds: dict[str, float], gemm: float) -> dict:
    phases = {
        p: {"tokens": 100, "flops": 1e9, "seconds": s, "cpu_s": 2 * s, "sys_s": 0.1, "faults": 10}
        for p, s in seconds.items()
    }
    return {"engine": engine, "gemm_after": gemm, "phases": phases}


def test_rounds_merge_into_medians_and_pair_neighbours_in_time() -> None:
    tf = [_row("transformers", {"update": s}, g) for s, g in ((10.0, 100.0), (12.0, 90.0), (11.0, 80.0))]
    vl = [_row("vllm", {"update": s}, 100.0) for s in (11.0, 12.0, 9.9)]
    merged = rb.merge_rounds(tf)
    assert merged["phases"]["update"]["seconds"] == 11.0
    assert merged["phases"]["update"]["cpu_s"] == 22.0
    assert merged["phases"]["update"]["rounds_seconds"] == [10.0, 12.0, 11.0]
    assert merged["gemm_after"] == 90.0
    assert merged["engine"] == "transformers"
    # each round's ratio pairs that round's two processes, not the medians
    assert rb.round_ratios({"transformers": tf, "vllm": vl}, "update") == pytest.approx([1.1, 1.0, 0.9])
    assert rb.round_ratios({"transformers": tf, "vllm": vl}, "missing") == []
    # each engine's own spread: its slowest round per token over its fastest
    assert rb.engine_spread(tf, "update") == pytest.approx(1.2)
    assert rb.engine_spread(vl, "update") == pytest.approx(12.0 / 9.9)
    assert rb.engine_spread(tf[:1], "update") is None
    assert rb.engine_spread(tf, "missing") is None


def test_rounds_below_one_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        rb.parse_args(["--rounds", "0"])
    assert "--rounds" in capsys.readouterr().err


@pytest.mark.slow
def test_the_whole_benchmark_runs_on_the_scripted_engine(tmp_path: Path) -> None:
    """The flow end to end (children, rounds, table, JSON) on the scripted engine: its numbers mean
    nothing, its structure must hold."""
    import json
    import subprocess
    import sys

    from codea1.engine.host_memory import tcmalloc_library

    malloc = "tcmalloc" if tcmalloc_library() else "system"  # the children run on it, as a run would
    out = tmp_path / "roofline.json"
    done = subprocess.run(
        [sys.executable, str(rb.__file__), "--set", "engine.kind=scripted", "--problems", "1", "--repeats", "1",
         "--rounds", "2", "--json", str(out), "--set", "engine.cpu_malloc=tcmalloc"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"| malloc {malloc}" in done.stdout.splitlines()[0]
    assert "per round, s/token vllm/transformers;" in done.stdout
    assert "spread transformers " in done.stdout  # each engine's own rounds, beside the pairs
    found = json.loads(out.read_text())
    assert [len(found["rounds"][e]) for e in ("transformers", "vllm")] == [2, 2]
    assert {r["malloc"] for e in ("transformers", "vllm") for r in found["rounds"][e]} == {malloc}
    phases = found["rows"][0]["phases"]
    assert set(phases) == {
        f"{role} {phase}" for role in ("coder", "tester")
        for phase in ("sampling", "ref log-probs", "first update", "update")
    }  # fmt: skip
    assert all(len(p["rounds_seconds"]) == 2 and p["flops"] > 0 for p in phases.values())
