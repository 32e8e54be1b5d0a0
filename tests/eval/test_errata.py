"""The errata table: exact patches, and both fixed harnesses pass on their own references."""

import dataclasses
from pathlib import Path

import pytest

from codea1.eval.errata import ERRATA, Erratum, apply_errata, errata_fingerprint, patch_harness

PARQUET = (
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "evalplus_humaneval_mbpp_plus.parquet"
)


def _shared_problems(ids):
    if not PARQUET.exists():
        pytest.skip(f"shared benchmark parquet not found at <repo>/../shared/data ({PARQUET.name})")
    from codea1.data.problems import load_problems

    return [p for p in load_problems(str(PARQUET)) if p.id in ids]


def test_patch_outcomes():
    e = Erratum("X/1", (("a(b)", "a(c)"),), "why")
    assert patch_harness("x = a(b)\n", e) == ("x = a(c)\n", "patched")
    assert patch_harness("x = a(c)\n", e) == ("x = a(c)\n", "already_fixed")
    assert patch_harness("x = q\n", e) == ("x = q\n", "not_applicable")
    assert patch_harness("a(b); a(b)", e)[1] == "not_applicable"  # ambiguous: never guessed


def test_every_erratum_is_documented_and_fingerprinted():
    assert {"HumanEval/32", "MBPP/56", "MBPP/6"} <= {e.problem_id for e in ERRATA}
    assert all(len(e.why) > 80 and e.replacements for e in ERRATA)
    assert errata_fingerprint() != errata_fingerprint(ERRATA[:1])


def test_errata_patch_the_shared_harnesses():
    problems = _shared_problems({"HumanEval/32", "MBPP/56"})
    patched, reports = apply_errata(problems)
    assert sorted((r.problem_id, r.outcome) for r in reports) == [
        ("HumanEval/32", "patched"),
        ("MBPP/56", "patched"),
    ]
    fixed = {p.id: p for p in patched}
    assert "abs(_poly(*inp, candidate(*inp)))" in fixed["HumanEval/32"].harness
    assert "def check(candidate):" in fixed["MBPP/56"].harness
    assert fixed["HumanEval/32"].metadata["errata"] == "patched"


def test_shared_namespace_breaks_mbpp56_and_separate_namespaces_do_not():
    """Trusted data only: shows why the harness must not share the solution's namespace."""
    (p,) = _shared_problems({"MBPP/56"})
    shared: dict = {}
    exec(p.reference, shared)
    exec(p.harness, shared)
    with pytest.raises(TypeError):
        shared["check"](shared[p.entry_point])
    cand, harn = {}, {}
    exec(p.reference, cand)
    exec(p.harness, harn)
    harn["check"](cand[p.entry_point])


def test_fixed_harnesses_pass_on_their_references_in_the_sandbox():
    from codea1.config import SandboxConfig
    from codea1.sandbox.local import Sandbox
    from codea1.types import CheckJob

    problems = _shared_problems({"HumanEval/32", "MBPP/56"})
    patched, _ = apply_errata(problems)
    jobs = [CheckJob(p.id, p.reference, p.entry_point, p.harness, 10.0) for p in patched]
    broken = next(p for p in problems if p.id == "HumanEval/32")
    jobs.append(CheckJob("unpatched", broken.reference, broken.entry_point, broken.harness, 10.0))
    sandbox = Sandbox(SandboxConfig(workers=1))
    try:
        verdicts = sandbox.run_checks(jobs)
    finally:
        sandbox.close()
    assert [v.status for v in verdicts[:2]] == ["pass", "pass"], verdicts
    assert verdicts[2].status != "pass"  # the unpatched HumanEval/32 harness fails its own reference


def test_entry_point_errata_fix_all_eight_mislabelled_mbpp_problems():
    ids = {e.problem_id for e in ERRATA if e.entry_point}
    problems = _shared_problems(ids)
    assert len(problems) == 8
    patched, reports = apply_errata(problems)
    assert {r.outcome for r in reports} == {"patched"}
    for p in patched:
        assert f"def check({p.entry_point}):" in p.harness
        cand, harn = {}, {}
        exec(p.reference, cand)
        exec(p.harness, harn)
        harn["check"](cand[p.entry_point])  # passes with separate namespaces


def test_apply_errata_leaves_other_problems_alone():
    (p,) = _shared_problems({"HumanEval/0"})
    out, reports = apply_errata([p])
    assert out == [p] and reports == []
    assert dataclasses.replace(p) == out[0]
