"""UnLeakedTestBench's protocol in `eval tests`: hand-checked Mut@k with Cosmic-Ray's operators and
the AST mutator, coverage measured in the sandbox, the K-query rounds, modules the sandbox lacks, and
the command end to end (tests file, the data's example tests, a fake model)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codea1.cli import main
from codea1.config import SandboxConfig
from codea1.data.loaders.ult import convert_ult
from codea1.data.problems import load_problems
from codea1.data.rows import repo_root
from codea1.engine.base import Completion
from codea1.eval.sandbox_coverage import analyse, measure_arcs, percentages
from codea1.eval.suite_eval import suite_from_lines
from codea1.eval.ult_eval import evaluate_iterative, summarize_iterative
from codea1.eval.ult_sampling import example_suites, sample_iterative
from codea1.sandbox.local import Sandbox

pytest.importorskip("cosmic_ray", reason="the cosmic-ray package (the ult/test extra) is not installed")

LITE = repo_root().parent / "shared" / "data" / "ULT_Lite.json"
SIGN = "def sign(x):\n    if x > 0:\n        return 1\n    return 0\n"
GAP = "def gap(a, b):\n    return a - b if a > b else b - a\n"
# sign: two correct tests and a wrong one (sign(0) is 0); gap: two correct tests
SIGN_TESTS = ["assert sign(5) == 1", "assert sign(-3) == 0", "assert sign(0) == 1"]
GAP_TESTS = ["assert gap(5, 2) == 3", "assert gap(2, 5) == 3"]


def _problem(name: str, code: str, tests: list[str], task: str):
    row = {"func_name": name, "code": code, "prompt": name, "task_id": task, "test_list": tests}
    problem, issues = convert_ult(row)
    assert not issues
    return problem


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(workers=2)) as sb:
        yield sb


def _score(sandbox, problems, mutant_source, k=3):
    suites = {p.id: s[0] for p, s in zip(problems, example_suites(problems).values(), strict=True)}
    return evaluate_iterative(problems, suites, sandbox, k=k, max_mutants=0, mutant_source=mutant_source)


def test_hand_checked_mut_at_k_with_cosmic_rays_operators(sandbox):
    sign, gap = _problem("sign", SIGN, SIGN_TESTS, "1"), _problem("gap", GAP, GAP_TESTS, "2")
    rec_sign, rec_gap = _score(sandbox, [sign, gap], "cosmic-ray")
    # sign's 12 mutants: > to ==, !=, <, <=, >= and `not`; 0 -> 1, -1 in the test; 1 -> 2, 0 and
    # 0 -> 1, -1 in the returns. sign(5) kills ==, <, <=, not, return 2, return 0 (6); sign(-3) adds
    # !=, return 1, return -1 (9). >=, > 1 and > -1 agree with sign on 5 and -3. The wrong test
    # sign(0) == 1 would kill >= and > -1 too, but only correct tests kill.
    assert rec_sign["oracle"] == ["valid", "valid", "wrong_prediction"] and rec_sign["valid"] == 2
    assert (rec_sign["mutants"], rec_sign["killed"], rec_sign["killed_at"]) == (12, 9, [6, 9, 9])
    # gap's 30 mutants: each `-` to 11 other operators (22), > to ==, !=, <, <=, >=, is, is not, and
    # `not`. gap(5, 2) kills the 11 of a - b and ==, <, <=, is, not (16); gap(2, 5) the 11 of b - a
    # and !=, is not (29); only >= survives.
    assert (rec_gap["mutants"], rec_gap["killed"], rec_gap["killed_at"]) == (30, 29, [16, 29])
    summary = summarize_iterative([rec_sign, rec_gap], 3)["ult"]
    assert summary["pass@3"] == pytest.approx(100 * 4 / 6)  # 4 correct tests in 2 x 3 slots
    assert summary["mut@3"] == pytest.approx(100 * (9 / 12 + 29 / 30) / 2)
    assert summary["Mul"] == pytest.approx(summary["pass@3"] * summary["mut@3"] / 100)
    assert summary["LCov@3"] == pytest.approx(100.0) and summary["BCov@3"] == pytest.approx(100.0)


def test_hand_checked_mut_at_k_with_the_ast_mutator(sandbox):
    (rec,) = _score(sandbox, [_problem("sign", SIGN, SIGN_TESTS, "1")], "ast")
    # 8 mutants: >=, negated if, > 1, return None / 2 / 0 (line 3), return None / 1 (line 4);
    # sign(5) kills negated if and the three of line 3 (4), sign(-3) the two of line 4 (6)
    assert (rec["mutants"], rec["killed"], rec["killed_at"]) == (8, 6, [4, 6, 6])
    assert rec["mutant_source"] == "ast" and rec["mutation_score"] == pytest.approx(0.75)


def test_coverage_in_the_sandbox_is_hand_checked_and_agrees_with_coverage_py(sandbox, tmp_path):
    (row,) = measure_arcs(sandbox, [("", SIGN, "sign", ["sign(5)", "sign(-3)", "sign.__code__"])])
    assert row[2] is None  # refused: it uses the function other than by calling it
    analysis = analyse(SIGN)
    assert percentages(analysis, row[0]) == pytest.approx((100 * 2 / 3, 50.0))  # lines 2, 3; 1 of 2 branches
    assert percentages(analysis, row[0] | row[1]) == pytest.approx((100.0, 100.0))
    tricky = (
        "def walk(items, limit=3):\n"
        "    def inner(v):\n"
        "        return [w * 2 for w in range(v) if w % 2]\n"
        "    out = []\n"
        "    i = 0\n"
        "    while i < len(items):\n"
        "        try:\n"
        "            if items[i] > limit:\n"
        "                raise ValueError(items[i])\n"
        "            out.extend(inner(items[i]))\n"
        "        except ValueError:\n"
        "            out.append(-1)\n"
        "            break\n"
        "        finally:\n"
        "            i += 1\n"
        "    else:\n"
        "        out.append(0)\n"
        "    gen = (x for x in out if x)\n"
        "    return list(gen)\n"
    )
    calls = ["walk([1, 2, 3])", "walk([5])", "walk([])"]
    (arcs,) = measure_arcs(sandbox, [("import math", tricky, "walk", calls)])
    script = (
        "import coverage, json, sys\n"
        "cov = coverage.Coverage(branch=True, data_file=None)\n"
        "cov.start()\n"
        "ns = {}\n"
        "exec(compile(open(sys.argv[1]).read(), sys.argv[1], 'exec'), ns)\n"
        f"for c in {calls!r}:\n"
        "    eval(c, ns)\n"
        "cov.stop()\n"
        "print(json.dumps(sorted(cov.get_data().arcs(sys.argv[1]))))\n"
    )
    module = tmp_path / "walk.py"
    module.write_text(tricky)
    out = subprocess.run(
        [sys.executable, "-c", script, str(module)], capture_output=True, text=True, check=True
    )
    host = {tuple(a) for a in json.loads(out.stdout)}
    measured = set().union(*arcs)
    analysis = analyse(tricky)
    assert measured & analysis.arcs == host & analysis.arcs
    assert percentages(analysis, measured) == percentages(analysis, host)


def test_a_function_needing_a_module_the_sandbox_lacks_is_reported_not_scored(sandbox):
    needy = _problem("f", "def f(x):\n    import no_such_module_codea1\n    return x\n", [], "3")
    sign = _problem("sign", SIGN, SIGN_TESTS, "1")
    assert needy.metadata["needs"] == ["no_such_module_codea1"]
    records = _score(sandbox, [needy, sign], "ast")
    assert records[0]["unavailable"] == ["no_such_module_codea1"]
    summary = summarize_iterative(records, 3)["ult"]
    assert (summary["problems"], summary["unavailable"]) == (1, 1)
    assert summary["pass@3"] == pytest.approx(100 * 2 / 3)  # the needy function is not a 0


class FakeTester:
    """Answers each round with the next scripted test (an earlier one again in round 3)."""

    name = "fake"
    last_stats: dict = {}

    def __init__(self, answers):
        self.answers, self.prompts, self.seeds = answers, [], []

    def render(self, messages):
        return messages[-1]["content"]

    def generate(self, prompts, params):
        self.prompts.append(list(prompts))
        self.seeds.append(params.seed)
        text = self.answers[len(self.prompts) - 1]
        return [Completion(i, f"```python\n{text}\n```", (), (), ()) for i in range(len(prompts))]


def test_k_query_rounds_show_earlier_tests_and_keep_only_new_ones():
    sign = _problem("sign", SIGN, [], "1")
    tester = FakeTester(
        ["assert sign(5) == 1", "assert sign(-3) == 0", "assert sign(5) == 1", "assert sign(0) == 0"]
    )
    from codea1.engine.base import SamplingParams

    (suite,) = sample_iterative(tester, [sign], SamplingParams(n=4, seed=7), 4)[sign.id]
    assert [t.call for t in suite.tests] == ["sign(5)", "sign(-3)", "sign(0)"]  # round 3 repeated round 1
    assert tester.seeds == [7, 8, 9, 10]
    first, second, fourth = tester.prompts[0][0], tester.prompts[1][0], tester.prompts[3][0]
    assert "def sign(x):" in first and "written so far" not in first
    assert "assert sign(5) == 1" in second and "assert sign(-3) == 0" in fourth


def _ult_file(tmp_path: Path) -> Path:
    rows = [
        {"func_name": "sign", "code": SIGN, "prompt": "Sign.", "task_id": "1", "test_list": SIGN_TESTS},
        {"func_name": "gap", "code": GAP, "prompt": "Gap.", "task_id": "2", "test_list": GAP_TESTS},
    ]
    path = tmp_path / "ult.json"
    path.write_text(json.dumps(rows))
    return path


def _cli(tmp_path: Path, *extra: str) -> list[str]:
    return ["eval", "tests", "--data", f"ult:{_ult_file(tmp_path)}", "--k", "3", "--workers", "2",
            "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"), *extra]  # fmt: skip


def test_eval_tests_on_ult_data_runs_the_k_query_protocol_and_resumes(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(_cli(tmp_path, "--example-tests", "--max-mutants", "0", "--output", str(out))) == 0
    printed = capsys.readouterr()
    for name in ("pass@3", "LCov@3", "BCov@3", "mut@3", "Mul"):
        assert name in printed.out
    metrics = json.loads(out.read_text())["ult"]
    assert metrics["mut@3"] == pytest.approx(100 * (9 / 12 + 29 / 30) / 2)
    assert main(_cli(tmp_path, "--example-tests", "--max-mutants", "0")) == 0
    assert "2 problems already done" in capsys.readouterr().err


def test_eval_tests_with_a_model_asks_one_test_per_round(tmp_path, capsys, monkeypatch):
    tester = FakeTester(
        ["assert sign(5) == 1\nassert gap(5, 2) == 3", "assert sign(-3) == 0", "assert gap(1, 1) == 0"]
    )
    monkeypatch.setattr("codea1.cli.eval_args.load_model", lambda spec, args: tester)
    assert main(_cli(tmp_path, "--model", "org/fake-tester", "--mutants", "ast", "--seed", "3")) == 0
    assert len(tester.prompts) == 3 and tester.seeds == [3, 4, 5]
    assert "pass@3" in capsys.readouterr().out


def test_bad_option_mixes_are_one_line_errors(tmp_path, capsys):
    assert main(_cli(tmp_path)) == 2
    assert "give exactly one of --model, --tests or --example-tests" in capsys.readouterr().err
    assert main(_cli(tmp_path, "--example-tests", "--blackbox")) == 2
    assert main(["eval", "tests", "--data", "demo:easy", "--example-tests", "--protocol", "suite",
                 "--tests", str(_ult_file(tmp_path))]) == 2  # fmt: skip


@pytest.mark.skipif(not LITE.is_file(), reason=f"ULT-Lite not found at {LITE}")
def test_lite_example_tests_pass_as_in_a_plain_run_of_ults_header_function_and_test(sandbox):
    problems = load_problems(f"ult:{LITE}", limit=12)
    problems = [p for p in problems if "random" not in p.metadata["function"]]  # nondeterministic ones
    records = _score_limited(sandbox, problems)
    driver = (
        "import json, sys\n"
        "job = json.load(sys.stdin)\n"
        "ns = {}\n"
        "exec(job['src'], ns)\n"
        "ok = 0\n"
        "for t in job['tests']:\n"
        "    try:\n"
        "        exec(t, dict(ns))\n"
        "        ok += 1\n"
        "    except Exception:\n"
        "        pass\n"
        "print(ok)\n"
    )
    for p, rec in zip(problems, records, strict=True):
        job = {"src": p.reference, "tests": p.metadata["example_tests"]}
        proc = subprocess.run([sys.executable, "-c", driver], input=json.dumps(job), capture_output=True, text=True,
                              timeout=60, check=True)  # fmt: skip
        assert rec["valid"] == int(proc.stdout), p.id


def _score_limited(sandbox, problems):
    suites = {p.id: s[0] for p, s in zip(problems, example_suites(problems).values(), strict=True)}
    return evaluate_iterative(problems, suites, sandbox, k=5, max_mutants=1, mutant_source="ast")


def test_suite_from_lines_keeps_ults_asserts():
    suite = suite_from_lines(SIGN_TESTS, "sign")
    assert [t.predicted for t in suite.tests] == ["1", "0", "1"]
