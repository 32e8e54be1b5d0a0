"""``engine.cpu_malloc: tcmalloc``: ``codea1 train`` restarts itself once on TCMalloc, says what it
runs on, and goes on with the system's allocator (saying why) where it cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.cli.malloc_relaunch import RELAUNCHED_ENV, Relaunch, malloc_in_use
from codea1.config import EngineConfig, load_config
from codea1.engine.host_memory import TCMALLOC_LIBRARY_ENV, tcmalloc_library, tcmalloc_loaded
from tests.scripted_run import SCRIPTED_RUN

TCMALLOC = ["--steps", "1", "--set", "engine.cpu_malloc=tcmalloc"]


def _train(
    tmp_path: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``codea1 train`` as the program (a scripted step), in a process of its own."""
    base = {
        k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", TCMALLOC_LIBRARY_ENV, RELAUNCHED_ENV)
    }
    cmd = [
        sys.executable,
        "-m",
        "codea1",
        "train",
        *SCRIPTED_RUN,
        *TCMALLOC,
        "--run-dir",
        str(tmp_path / "run"),
    ]
    return subprocess.run(
        [*cmd, *extra], env={**base, **(env or {})}, capture_output=True, text=True, timeout=300
    )


def _header(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return next(line for line in done.stdout.splitlines() if line.startswith("codea1 train | preset"))


def test_the_command_restarts_on_tcmalloc_and_says_so(tmp_path: Path) -> None:
    if tcmalloc_library() is None:
        pytest.skip("no TCMalloc library (apt install libtcmalloc-minimal4)")
    header = _header(_train(tmp_path))
    assert "| malloc tcmalloc |" in header  # the process that trained had it loaded (its own symbols)
    assert (tmp_path / "run" / "metrics.jsonl").exists()
    plain = _header(_train(tmp_path / "b", "--set", "engine.cpu_malloc=system"))
    assert "| malloc system |" in plain  # no restart asked, none made


@pytest.mark.parametrize("named", ["absent", "text"])
def test_without_the_library_the_run_goes_on_and_says_why(tmp_path: Path, named: str) -> None:
    """Issue 45, item 17: a ``CODEA1_TCMALLOC`` naming no file was reported as "not found ... or set
    CODEA1_TCMALLOC" (it was set), and a text file named by it was taken for the library."""
    library = tmp_path / "lib.so"
    if named == "text":
        library.write_text("not an ELF file\n")
    done = _train(tmp_path, env={TCMALLOC_LIBRARY_ENV: str(library)})
    why = "no such file" if named == "absent" else "not a shared library (no ELF header)"
    assert f"| malloc system (CODEA1_TCMALLOC={library}: {why}) |" in _header(done)
    assert done.stdout.count("codea1 train | preset") == 1  # no restart on it


def _loaded_library(name: str) -> str:
    """The path of a shared library this process has mapped (``libm.so``), from /proc/self/maps."""
    maps = Path("/proc/self/maps")
    paths = {line.split()[-1] for line in maps.read_text().splitlines()} if maps.exists() else set()
    found = sorted(p for p in paths if Path(p).name.startswith(name) and Path(p).is_file())
    if not found:
        pytest.skip(f"no {name} mapped in this process")
    return found[0]


def test_a_library_that_does_not_load_restarts_once_only(tmp_path: Path) -> None:
    not_tcmalloc = _loaded_library("libm.so")  # a real shared library without TCMalloc's symbols
    done = _train(tmp_path, env={TCMALLOC_LIBRARY_ENV: not_tcmalloc})
    assert f"LD_PRELOAD={not_tcmalloc} did not load it" in _header(done)
    assert done.stdout.count("codea1 train | preset") == 1  # one restart, one run


def test_the_restart_runs_this_codea1_not_one_in_the_working_directory(tmp_path: Path) -> None:
    """Issue 45, item 16: the restart ran ``python -m codea1``, which imports ``./codea1`` first: any
    folder of that name where a user runs ``codea1 train`` replaced the program."""
    work = tmp_path / "work"
    stand_in = work / "codea1"
    stand_in.mkdir(parents=True)
    marker = tmp_path / "stand-in-ran"
    body = f"open({str(marker)!r}, 'w').write('ran')\nprint('STAND-IN')\n"
    for name in ("__init__.py", "__main__.py"):
        (stand_in / name).write_text(body)
    driver = tmp_path / "driver.py"  # outside `work`: its own import path does not hold the stand-in
    driver.write_text(
        "import sys\nfrom codea1.cli.malloc_relaunch import Relaunch\n"
        "sys.argv = ['codea1', '--version']\nRelaunch('').exec()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, str(driver)], cwd=work, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert not marker.exists() and "STAND-IN" not in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0 and done.stdout.startswith("codea1 "), done.stdout + done.stderr


def test_in_process_the_command_never_restarts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", *SCRIPTED_RUN, *TCMALLOC, "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0
    if tcmalloc_loaded():  # this test process itself runs on it
        assert "| malloc tcmalloc |" in out
    elif tcmalloc_library() is None:
        assert "| malloc system (TCMalloc not found;" in out
    else:
        assert (
            "| malloc system (engine.cpu_malloc=tcmalloc: run in-process, not restarted on TCMalloc) |" in out
        )


def test_the_restart_keeps_the_users_preload_and_marks_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "libmine.so")
    env = Relaunch("libtcmalloc_minimal.so.4").environment()
    assert env["LD_PRELOAD"] == "libtcmalloc_minimal.so.4 libmine.so" and env[RELAUNCHED_ENV] == "1"
    monkeypatch.delenv("LD_PRELOAD")
    assert Relaunch("x.so").environment()["LD_PRELOAD"] == "x.so"


def test_only_a_tcmalloc_run_that_may_restart_asks_to(monkeypatch: pytest.MonkeyPatch) -> None:
    from codea1.cli import malloc_relaunch

    monkeypatch.setattr(malloc_relaunch, "tcmalloc_loaded", lambda: False)
    monkeypatch.setattr(malloc_relaunch, "tcmalloc_library", lambda: "libtc.so")
    assert malloc_in_use(EngineConfig(), can_restart=True) == "system"
    with pytest.raises(Relaunch) as asked:
        malloc_in_use(EngineConfig(cpu_malloc="tcmalloc"), can_restart=True)
    assert asked.value.library == "libtc.so"
    assert "not restarted" in malloc_in_use(EngineConfig(cpu_malloc="tcmalloc"), can_restart=False)
    on_ray = EngineConfig(cpu_malloc="tcmalloc", backend="ray")
    assert "local backend only" in malloc_in_use(on_ray, can_restart=True)
    monkeypatch.setenv(RELAUNCHED_ENV, "1")  # the restarted process: never again, and the mark goes
    assert "did not load it" in malloc_in_use(EngineConfig(cpu_malloc="tcmalloc"), can_restart=True)
    assert RELAUNCHED_ENV not in os.environ


def test_the_setting_is_checked() -> None:
    from codea1.config import ConfigError

    with pytest.raises(ConfigError, match="engine.cpu_malloc"):
        load_config("demo-cpu", ["engine.cpu_malloc=jemalloc"])


def test_the_sandbox_workers_never_get_the_preload(monkeypatch: pytest.MonkeyPatch) -> None:
    from codea1.sandbox.worker.isolation import worker_environment

    monkeypatch.setenv("LD_PRELOAD", "libtcmalloc_minimal.so.4")
    assert "LD_PRELOAD" not in worker_environment()
