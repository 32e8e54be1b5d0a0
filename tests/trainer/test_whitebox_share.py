"""``tester.whitebox_share`` (deviation D14): the tester sees the candidate on that share of its
(problem, code) prompts and gets the black-box prompt on the rest, one prompt per code either way;
which ones is a seeded draw, the same for the same seed; 1.0 (the default) is the paper's prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from codea1 import rollout as ro
from codea1 import step_metrics
from codea1.cli import main
from codea1.data import prompts as prompt_text
from codea1.engine.base import Completion
from codea1.engine.scripted import ScriptedPolicy
from codea1.tracking import read_metrics
from codea1.types import CodeExtraction, Problem
from tests.scripted_run import SCRIPTED_RUN

PROBLEMS = [Problem(f"p{i}", f"Return {i}.", "f", f"def f():\n    return {i}\n") for i in range(4)]


def _step() -> tuple[list[ro.Prompt], list[list[ro.CodeSample]]]:
    """Four problems, four codes each; the last code of each has no extracted code: 12 eligible."""
    prompts = [ro.Prompt(i, -1, f"coder prompt {i}") for i in range(len(PROBLEMS))]
    codes = [
        [
            ro.CodeSample(
                Completion(i, "", (), (), (), True),
                CodeExtraction(f"def f():\n    return 'code {i}.{c}'\n")
                if c < 3
                else CodeExtraction(None, "none"),
            )
            for c in range(4)
        ]
        for i in range(len(PROBLEMS))
    ]
    return prompts, codes


def _tester_prompts(**kw) -> list[ro.Prompt]:
    prompts, codes = _step()
    out, skipped = ro.tester_prompts(
        PROBLEMS, prompts, codes, ScriptedPolicy(["x"]), view="whitebox", tests_per_suite=4,
        max_prompt_tokens=100_000, **kw,
    )  # fmt: skip
    assert skipped == []
    return out


def test_the_share_of_white_box_prompts_is_as_set_and_the_rest_are_black_box() -> None:
    policy = ScriptedPolicy(["x"])
    for share, shown in ((0.5, 6), (0.25, 3), (0.0, 0), (1 / 3, 4)):
        out = _tester_prompts(whitebox_share=share, seed=7)
        assert [(p.problem_index, p.code_index) for p in out] == [(i, c) for i in range(4) for c in range(3)]
        assert sum(p.whitebox for p in out) == shown
        assert step_metrics.tester_prompt_metrics(out) == {"tester/whitebox_prompt_rate": shown / 12}
        for p in out:  # a white-box prompt shows its own code; a black-box one is the Self-Play prompt
            code_shown = f"'code {p.problem_index}.{p.code_index}'" in p.text
            assert code_shown is p.whitebox
            if not p.whitebox:
                blackbox = prompt_text.tester_messages(
                    PROBLEMS[p.problem_index], None, n_tests=4, view="blackbox"
                )
                assert p.text == policy.render(blackbox)


def test_the_draw_is_fixed_by_the_seed() -> None:
    def pairs(seed: int) -> list[tuple[int, int]]:
        return [
            (p.problem_index, p.code_index)
            for p in _tester_prompts(whitebox_share=0.5, seed=seed)
            if p.whitebox
        ]

    assert pairs(3) == pairs(3)  # the same step of the same run (a resumed one too) shows the same codes
    assert len({tuple(pairs(seed)) for seed in range(8)}) > 1  # other steps, other codes


def test_share_one_is_the_papers_prompts() -> None:
    default = _tester_prompts()
    assert _tester_prompts(whitebox_share=1.0, seed=5) == default
    assert (
        all(p.whitebox for p in default)
        and step_metrics.tester_prompt_metrics(default)["tester/whitebox_prompt_rate"] == 1.0
    )
    assert step_metrics.tester_prompt_metrics([]) == {}


def test_a_run_logs_the_share_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", *SCRIPTED_RUN, "--steps", "2"]
    assert main([*argv, "--run-dir", str(tmp_path / "half"), "--set", "tester.whitebox_share=0.5"]) == 0
    assert main([*argv, "--run-dir", str(tmp_path / "again"), "--set", "tester.whitebox_share=0.5"]) == 0
    assert main([*argv, "--run-dir", str(tmp_path / "paper")]) == 0
    half, again, paper = (read_metrics(tmp_path / d) for d in ("half", "again", "paper"))
    for m in half:  # of the step's extracted codes, half (halves up) show their code
        rate = m["tester/whitebox_prompt_rate"]
        assert 0.0 < rate < 1.0 and abs(rate - 0.5) <= 0.5 / m["tester/samples"] * 4
    assert [m["tester/whitebox_prompt_rate"] for m in again] == [
        m["tester/whitebox_prompt_rate"] for m in half
    ]
    assert [m["tester/whitebox_prompt_rate"] for m in paper] == [1.0, 1.0]
    capsys.readouterr()
    assert main([*argv, "--run-dir", str(tmp_path / "bad"), "--set", "tester.whitebox_share=1.5"]) == 2
    assert "tester.whitebox_share must be in [0, 1]" in capsys.readouterr().err
    selfplay = [*argv, "--method", "selfplay", "--run-dir", str(tmp_path / "sp")]
    assert main([*selfplay, "--set", "tester.whitebox_share=0.5"]) == 2
    assert "needs tester.view=whitebox" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists() and not (tmp_path / "sp").exists()
