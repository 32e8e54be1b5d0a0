"""``codea1 train --resume RUN_DIR`` (issue 26, part 7): each flag is accepted or refused explicitly, a
damaged ``config.yaml`` is refused in one line before anything loads, and a finished run is left
untouched (not even its lock file, Mistake Book or TensorBoard directory changes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codea1.cli import train as train_cli

from .run_dirs import assert_one_line_error, private_copy, snapshot, train

TENSORBOARD = ["--engine", "scripted", "--progress", "plain", "--set", "train.save_every=2"]
"""A seconds-long scripted run, as ``FAST``, that writes TensorBoard event files."""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-step scripted run that writes TensorBoard files (a resume must not add one)."""
    run_dir = tmp_path_factory.mktemp("base") / "run"
    code, out, err = train(*TENSORBOARD, "--steps", "2", "--run-dir", str(run_dir))
    assert code == 0, out + err
    assert list((run_dir / "tensorboard").iterdir()) and (run_dir / "checkpoints" / "step_000002").is_dir()
    return run_dir


@pytest.fixture
def run(finished_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the finished run; nothing may build an engine (a refusal comes first)."""
    copy = private_copy(finished_run, tmp_path, monkeypatch.chdir)

    def no_engine(*args: object, **kwargs: object) -> None:
        raise AssertionError("an engine was built")

    monkeypatch.setattr(train_cli, "build_models", no_engine)
    return copy


def test_a_finished_run_is_left_untouched(run: Path) -> None:
    before = snapshot(run)
    code, out, err = train("--resume", str(run))
    assert code == 0 and err == "", out + err
    assert out.splitlines() == [
        f"codea1 train: {run} is finished (checkpoint of step 2, train.steps=2): nothing to do, nothing "
        f"changed; to extend it raise train.steps in {run / 'config.yaml'}, then --resume"
    ]
    assert snapshot(run) == before  # the lock file, the book and tensorboard/ included
    assert not list(Path.cwd().iterdir())


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--steps", "9"], "--steps 9 would change train.steps=2"),
        (["--engine", "transformers"], "--engine transformers would change engine.kind=scripted"),
        (["--no-mistake-book"], "--no-mistake-book would change mistake_book.enabled=true"),
        (["--alpha", "0.7"], "--alpha 0.7 would change reward.alpha=0.5"),
        (["--method", "golden"], "--method golden would change train.method=a1"),
        (["--tester-view", "blackbox"], "--tester-view blackbox would change tester.view=whitebox"),
        (["--preset", "tiny-cpu"], "drop --preset tiny-cpu"),
        (["--set", "coder.sampling.n=3"], "--set coder.sampling.n=3 would change it"),
        (["--run-dir", "elsewhere"], "--run-dir elsewhere is not the run directory"),
    ],
)
def test_a_flag_that_changes_the_run_is_refused(run: Path, flags: list[str], needle: str) -> None:
    before = snapshot(run)
    code, out, err = train("--resume", str(run), *flags)
    assert_one_line_error(code, err, needle)
    assert snapshot(run) == before and not list(Path.cwd().iterdir())


def test_flags_that_restate_the_run_are_accepted(run: Path) -> None:
    before = snapshot(run)
    restated = ["--steps", "2", "--engine", "scripted", "--run-dir", str(run), "--alpha", "0.5", "--method",
                "a1", "--tester-view", "whitebox", "--progress", "plain", "--set", "sandbox.workers=1"]  # fmt: skip
    code, out, err = train("--resume", str(run), *restated)
    assert code == 0 and err == "" and "is finished" in out, out + err
    assert snapshot(run) == before


def test_steps_extend_through_the_config_file(run: Path) -> None:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["train"]["steps"] = 3
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    code, out, err = train("--resume", str(run), "--steps", "9")
    assert_one_line_error(code, err, "--steps 9 would change train.steps=3", "raise train.steps there")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (b"", "config.yaml is empty (damaged?)"),
        (b"\n# nothing\n", "config.yaml is empty (damaged?)"),
        (b"data:\n  train: demo:train\n", "lacks the section(s) coder, tester"),
    ],
)
def test_a_damaged_config_is_refused_before_anything_loads(run: Path, text: bytes, needle: str) -> None:
    (run / "config.yaml").write_bytes(text)
    before = snapshot(run)
    code, out, err = train("--resume", str(run))
    assert_one_line_error(
        code, err, needle, "nothing was loaded or changed", "checkpoints/step_000002/config.yaml"
    )
    assert out == ""  # not even the banner: nothing was loaded
    assert snapshot(run) == before and not list(Path.cwd().iterdir())


def test_a_finished_run_with_a_damaged_checkpoint_resumes_from_the_older_one(run: Path) -> None:
    """Not finished after all: the newest checkpoint does not verify, so resuming has work to do."""
    state = run / "checkpoints" / "step_000002" / "state.json"
    state.write_bytes(state.read_bytes()[:10])
    with pytest.raises(AssertionError, match="an engine was built"):  # it went on to build the engine
        train("--resume", str(run))
