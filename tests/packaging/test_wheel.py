"""The wheel ships what an installed codea1 needs: every module, preset, prompt template and demo file.

The wheel is built offline (``--no-build-isolation``; the test extra installs setuptools) from a copy
of the source tree, so the build leaves nothing in the checkout; it is installed with ``pip install
--target`` into an empty directory and run from another empty directory, so neither the checkout nor
the current directory can supply a preset.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from codea1.config import preset_names

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_PRESETS = {
    "demo-cpu",
    "tiny-cpu",
    "qwen-coder-0.5b-cpu",
    "paper-1.5b",
    "paper-3b",
    "paper-7b",
    "paper-1.5b-ray",
    "paper-3b-ray",
    "paper-7b-ray",
}


def _package_files(root: Path) -> set[str]:
    """Every file of the ``codea1`` package in ``root``, as wheel paths (``codea1/...``)."""
    return {
        p.relative_to(root).as_posix()
        for p in (root / "codea1").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(ROOT / "codea1", src / "codea1", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist)]
    cmd.append(str(src))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (built,) = dist.glob("codea1-*.whl")
    return built


def test_presets_live_in_the_package() -> None:
    assert set(preset_names()) == SHIPPED_PRESETS
    assert {p.stem for p in (ROOT / "codea1" / "presets").glob("*.yaml")} == SHIPPED_PRESETS


def test_the_wheel_holds_every_package_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _package_files(ROOT)
    assert {f"codea1/presets/{p}.yaml" for p in SHIPPED_PRESETS} <= expected
    assert any(n.startswith("codea1/data/templates/") for n in expected)
    assert any(n.startswith("codea1/data/demo/") for n in expected)
    assert sorted(expected - names) == []
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "codea1 = codea1.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_an_installed_wheel_finds_every_preset_from_any_directory(wheel: Path, tmp_path: Path) -> None:
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site)]
    cmd.append(str(wheel))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    script = (
        "import codea1, sys\n"
        "from codea1.config import load_config, preset_names\n"
        "from codea1.data.problems import load_problems\n"
        "print(codea1.__file__)\n"
        "for name in preset_names():\n"
        "    assert load_config(name).preset == name, name\n"
        "print(' '.join(preset_names()))\n"
        "print(len(load_problems('demo:train')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    module, presets, n_demo = done.stdout.split("\n")[:3]
    assert Path(module).is_relative_to(site)
    assert set(presets.split()) == SHIPPED_PRESETS
    assert int(n_demo) > 0
    train = [sys.executable, "-m", "codea1", "train", "--preset", "tiny-cpu", "--engine", "scripted"]
    train += "--steps 1 --progress plain --set tracking.tensorboard=false --run-dir run".split()
    done = subprocess.run(train, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "finished step 1/1" in done.stdout
    assert (elsewhere / "run" / "checkpoints" / "step_000001" / "state.json").is_file()
