"""`codea1 report` end to end on synthetic run directories written the way the trainer writes them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from codea1.cli import main
from codea1.report.figures import FIGURES

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ALL_NAMESPACES = ("coder", "tester", "exec", "replay", "loss", "time")


def metric_rows(
    steps: int, seed: int, alpha: float = 0.5, namespaces: tuple[str, ...] = ALL_NAMESPACES
) -> list[dict]:
    """Plausible per-step metrics: rewards rising with noise, a Mistake Book that fills then drains.

    A larger ``alpha`` (weight of validity in R_T) gives easier tests: higher Val and pass rates,
    lower Adv and fewer Mistake-Book additions, as in the paper's alpha ablation.
    """
    rng = np.random.default_rng(seed)
    easy = alpha - 0.5
    rows = []
    size = 0
    for step in range(1, steps + 1):
        t = step / steps
        row: dict = {"step": step}
        if "coder" in namespaces:
            row["coder/reward_mean"] = 0.45 + 0.3 * t + rng.normal(0, 0.02)
            row["coder/reward_std"] = 0.25 - 0.05 * t
            row["coder/extract_ok_rate"] = min(1.0, 0.85 + 0.1 * t)
            row["coder/response_tokens_mean"] = 180 + 40 * t + rng.normal(0, 5)
            row["coder/truncated_rate"] = 0.05 * (1 - t)
            row["coder/groups"] = 8
            row["coder/zero_variance_groups"] = int(rng.integers(0, 3))
            row["coder/adv_abs_max"] = float(rng.uniform(1.5, 2.5))
            row["coder/samples"] = 64  # no figure claims it: "other coder/ metrics"
        if "tester" in namespaces:
            val = 0.5 + 0.3 * t + 0.2 * easy
            adv = 0.4 - 0.1 * t - 0.3 * easy + rng.normal(0, 0.02)
            row["tester/reward_mean"] = alpha * val + (1 - alpha) * adv
            row.update({"tester/validity_mean": val, "tester/adversarial_mean": adv})
            row.update({"tester/valid_tests_mean": 4 + 3 * t, "tester/invalid_tests_mean": 3 - 2 * t})
            row["tester/invalid/parse_error"] = int(30 * (1 - t)) + int(rng.integers(0, 4))
            row["tester/invalid/wrong_expected"] = int(20 * (1 - t / 2))
            row["tester/invalid/duplicate"] = int(rng.integers(0, 5))
            row["tester/response_tokens_mean"] = 300 - 50 * t
            row["tester/truncated_rate"] = 0.1 * (1 - t)
        if "exec" in namespaces:
            row["exec/code_valid_rate"] = min(1.0, 0.8 + 0.15 * t)
            row["exec/gen_pass_rate"] = 0.5 + 0.3 * t + 0.2 * easy
            row["exec/history_pass_rate"] = (
                None if step < 4 else 0.4 + 0.15 * t + 0.1 * easy
            )  # null: no history
            row["exec/timeout_rate"] = float(rng.uniform(0, 0.02))
            row["exec/error_rate"] = float(rng.uniform(0, 0.05))
            row["exec/verdicts"] = 512
        if "replay" in namespaces:
            added = int(120 * (1 - 0.6 * t) * (1 - easy))
            removed = 0 if step < 4 else min(size + added, int(50 + 10 * t))
            size += added - removed
            row.update({"replay/book_size": size, "replay/added": added, "replay/removed": removed})
            row.update(
                {"replay/incremented": added // 3, "replay/decremented": removed * 2, "replay/evicted": 0}
            )
            row.update(
                {"replay/tests_retrieved": 0 if step < 4 else 64, "replay/problems_hit": 0 if step < 4 else 8}
            )
        if "loss" in namespaces:
            for role in ("coder", "tester"):
                row[f"loss/{role}/pg_loss"] = float(rng.normal(0, 0.1))
                row[f"loss/{role}/kl"] = 0.001 * step
                row[f"loss/{role}/clipfrac"] = float(rng.uniform(0, 0.1))
        if "time" in namespaces:
            phases = {"coder_rollout": 20.0, "tester_rollout": 25.0, "execution": 8.0, "update_coder": 12.0}
            phases["update_tester"] = 14.0
            row.update({f"time/{k}": v + float(rng.uniform(0, 3)) for k, v in phases.items()})
            row["time/step"] = sum(row[f"time/{k}"] for k in phases) + 1.0
        rows.append(row)
    return rows


def write_run(
    path: Path, seed: int, alpha: float, *, namespaces: tuple[str, ...] = ALL_NAMESPACES, steps: int = 10
) -> Path:
    """A run directory as the trainer leaves it, with metrics, config, samples and an eval result."""
    path.mkdir(parents=True)
    rows = metric_rows(steps, seed, alpha, namespaces)
    lines = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    (path / "metrics.jsonl").write_text(lines, encoding="utf-8")
    (path / "config.yaml").write_text(
        f"preset: tiny-cpu\nreward:\n  alpha: {alpha}\n  fixed_denominator: 8\ntrain:\n  steps: {steps}\n  seed: {seed}\n",
        encoding="utf-8",
    )
    (path / "samples").mkdir()
    (path / "samples" / "step_000001.jsonl").write_text('{"role": "coder"}\n', encoding="utf-8")
    (path / "checkpoints").mkdir()
    (path / "eval").mkdir()
    for step, score in ((5, 0.40 + alpha / 10), (steps, 0.52 + alpha / 10)):
        result = {
            "step": step,
            "humaneval+": {"pass@1": score, "avg@4": score - 0.01},
            "mbpp+": {"pass@1": score + 0.05},
        }
        (path / "eval" / f"step_{step:06d}.json").write_text(json.dumps(result), encoding="utf-8")
    return path


def png_sources(page: str) -> list[str]:
    return re.findall(r'<img src="([^"]+)"', page)


def test_two_runs_overlaid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_a = write_run(tmp_path / "alpha-0.5", seed=1, alpha=0.5)
    run_b = write_run(tmp_path / "alpha-1.0", seed=2, alpha=1.0)
    out = tmp_path / "out"
    assert main(["report", str(run_a), str(run_b), "--output", str(out)]) == 0
    page = (out / "index.html").read_text(encoding="utf-8")
    pngs = sorted(p.name for p in out.glob("*.png"))
    # every figure of the table has data in these runs (plus the leftover coder key; with several
    # runs, one evaluation figure per metric), and the page shows each PNG that exists
    per_metric = {f"evaluation_{m}.png" for m in ("humaneval__pass_1", "humaneval__avg_4", "mbpp__pass_1")}
    assert set(pngs) == {f"{spec.name}.png" for spec in FIGURES if spec.name != "evaluation"} | per_metric | {
        "other_coder.png"
    }
    assert sorted(png_sources(page)) == pngs
    for name in pngs:
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    assert "alpha-0.5" in page and "alpha-1.0" in page
    assert page.count("<details>") == 2 and "alpha: 0.5" in page and "alpha: 1.0" in page
    # the newest eval file (step 10) is the table; the config difference is listed
    assert "eval/step_000010.json (step 10)" in page and "0.62" in page and "mbpp+" in page
    assert "reward.alpha" in page
    assert "Every figure had data" in page
    assert str(out / "index.html") in capsys.readouterr().out


def test_torn_last_line_is_skipped_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "crashed", seed=4, alpha=0.5)
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 11, "coder/reward_mean": 0.7')  # the crash cut this line
    assert main(["report", str(run)]) == 0  # one run: the report goes to RUN_DIR/report
    err = capsys.readouterr().err
    assert "codea1: warning: crashed: metrics.jsonl line 11 is incomplete" in err
    page = (run / "report" / "index.html").read_text(encoding="utf-8")
    assert "line 11 is incomplete" in page
    assert '<th>steps logged</th><td class="num">10</td>' in page
    assert '<th>last step</th><td class="num">10</td>' in page
    assert (run / "report" / "coder_reward.png").read_bytes()[:8] == PNG_MAGIC


def test_run_with_missing_namespaces_still_reports(tmp_path: Path) -> None:
    full = write_run(tmp_path / "full", seed=5, alpha=0.5)
    partial = write_run(tmp_path / "partial", seed=6, alpha=0.5, namespaces=("coder", "tester"))
    out = tmp_path / "out"
    assert main(["report", str(full), str(partial), "-o", str(out)]) == 0
    both = (out / "index.html").read_text(encoding="utf-8")
    assert "No data for this figure in: partial" in both
    assert (out / "mistake_book.png").is_file()
    # the partial run alone, into the same directory: figures without data are gone, not stale
    assert main(["report", str(partial), "-o", str(out)]) == 0
    page = (out / "index.html").read_text(encoding="utf-8")
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert {"coder_reward.png", "tester_reward.png", "invalid_tests.png", "generation.png"} <= set(pngs)
    assert "mistake_book.png" not in pngs and "step_time.png" not in pngs
    assert sorted(png_sources(page)) == pngs
    not_plotted = page.split('id="not-plotted"')[1].split('id="eval-table"')[0]
    for title in ("Mistake Book", "Time per step by phase", "Sandbox timeouts and errors", "Code LLM update"):
        assert title in not_plotted


def test_missing_run_dir_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(tmp_path / "ok", seed=7, alpha=0.5)
    assert main(["report", str(run), str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("codea1: error: ") and "nope" in err and "does not exist" in err
    assert main(["report", str(tmp_path)]) == 2  # exists, but is not a run directory
    assert "not a training run directory" in capsys.readouterr().err


def test_long_run_names_are_not_cut_off_at_the_figures_edge(tmp_path: Path) -> None:
    """Runs that differ only at the end of a long name (two seeds of a variant) stay readable: the
    legends outside the axes are inside the saved image, whose right margin is blank."""
    import matplotlib.image

    long = "a1-reward.mutation_weight=0.5-and-more-words-s"
    runs = [write_run(tmp_path / f"{long}{seed}", seed=seed, alpha=0.5 + seed) for seed in (0, 1)]
    out = tmp_path / "out"
    assert main(["report", *map(str, runs), "--output", str(out)]) == 0
    for name in ("coder_reward.png", "evaluation_humaneval__pass_1.png"):
        image = matplotlib.image.imread(out / name)
        right, top = image[:, -4:, :3], image[:4, :, :3]
        assert (right > 0.98).all(), f"{name}: something is drawn up to the right edge (a clipped legend)"
        assert (top > 0.98).all(), f"{name}: something is drawn up to the top edge (a clipped title)"
