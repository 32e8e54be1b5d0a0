"""The worker between jobs: scratch cleanup, CPU accounting, and what one job leaves for the next."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox
from codea1.sandbox.tasks import ProgramTask
from codea1.sandbox.worker.isolation import wipe_directory

NEST = (
    "import os\n"
    "for _ in range(3000):\n"
    "    os.mkdir('d')\n"
    "    os.chdir('d')\n"
    "    open('f', 'w').close()\n"
    "os.mkdir('locked')\n"
    "os.chmod('locked', 0)\n"
    "def f(x):\n"
    "    return sorted(os.listdir('.'))  # the deep cwd (the minimal root has no /proc)\n"
)
LOOK = "import os\ndef f(x):\n    return sorted(os.listdir('.'))\n"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(workers=1)) as sb:
        yield sb


def test_wipe_removes_deep_trees_and_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    root = tmp_path / "scratch"
    deep = root.joinpath(*["a"] * 400)  # deeper than PATH_MAX allows as one path string
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    (root / "link").symlink_to(outside)
    (root / "a" / "link").symlink_to(outside)
    (root / "locked").mkdir()
    (root / "locked" / "f").write_text("x")
    (root / "locked").chmod(0)
    cwd = os.getcwd()
    wipe_directory(str(root))
    assert os.getcwd() == cwd
    assert list(root.iterdir()) == [] and (outside / "keep").read_text() == "k"


def test_files_of_one_job_are_gone_for_the_next_and_the_worker_survives(sandbox: Sandbox) -> None:
    before = sandbox.worker_pids()
    nest = ProgramTask.make(NEST, "f", ("f(0)",), sandbox.config, load_cpu_s=5.0)
    look = ProgramTask.make(LOOK, "f", ("f(0)",), sandbox.config)
    out_nest, out_look = sandbox.run_tasks([nest, look])
    assert out_nest.load_status == "pass" and out_nest.exprs[0].value == ["f", "locked"]
    assert out_look.exprs[0].kind == "value" and out_look.exprs[0].value == []
    assert sandbox.worker_pids() == before


def test_worker_cpu_grows_with_the_work_done(sandbox: Sandbox) -> None:
    burn = "def f(x):\n    return sum(range(x))\n"
    task = ProgramTask.make(burn, "f", ("f(3_000_000)",) * 3, sandbox.config)
    start = sandbox.worker_cpu_s()
    (out,) = sandbox.run_tasks([task])
    assert [e.value for e in out.exprs] == [sum(range(3_000_000))] * 3
    assert sandbox.worker_cpu_s() - start >= 0.05
