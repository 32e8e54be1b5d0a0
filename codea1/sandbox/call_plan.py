"""The calls an evalplus harness will make, known before it runs: the pipeline of a check.

An evalplus harness's ``check`` is a literal ``inputs`` list and one loop that calls the candidate
once per input, in order, and stops at the first failing assertion::

    def check(candidate):
        inputs = [[...], ...]
        results = [...]
        for i, (inp, exp) in enumerate(zip(inputs, results)):
            assertion(candidate(*inp), exp, 0)

For a harness of exactly this shape (the candidate's name used nowhere else in ``check``), the
calls it makes are a prefix of ``inputs``, in order, so the harness process may send the next
requests before the harness asks (:class:`~codea1.sandbox.worker.harness.CandidateProxy`): the call server
computes them back to back instead of waking once per call. Verdicts are unchanged: the answers are
those of the same calls in the same order, and answers computed past a failing assertion are never
read. Any other harness is called one request at a time. Runs on the trusted side (parent).
"""

from __future__ import annotations

import ast
import functools

from codea1.sandbox.worker.value_codec import CodecError, encode


def _check_function(tree: ast.Module) -> ast.FunctionDef | None:
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(defs) != 1 or len(defs[0].args.args) != 1 or defs[0].args.vararg or defs[0].args.kwarg:
        return None
    return defs[0]


def _loop_calls(fn: ast.FunctionDef, inputs_name: str) -> bool:
    """True when ``fn``'s only use of its parameter is ``param(*inp)`` in a loop over ``inputs``."""
    param = fn.args.args[0].arg
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == param]
    loops = [n for n in fn.body if isinstance(n, ast.For)]
    if len(uses) != 1 or len(loops) != 1:
        return False
    loop = loops[0]
    if inputs_name not in {n.id for n in ast.walk(loop.iter) if isinstance(n, ast.Name)}:
        return False
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Try)) for n in ast.walk(loop)):
        return False
    calls = [n for n in ast.walk(loop) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    mine = [c for c in calls if c.func.id == param]  # type: ignore[attr-defined]
    if len(mine) != 1 or mine[0].keywords or len(mine[0].args) != 1:
        return False
    star = mine[0].args[0]
    target = loop.target
    names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return isinstance(star, ast.Starred) and isinstance(star.value, ast.Name) and star.value.id in names


@functools.lru_cache(maxsize=256)
def planned_requests(harness: str) -> tuple[bytes, ...]:
    """The encoded call requests of an evalplus-shaped harness, in order; () for any other harness."""
    try:
        tree = ast.parse(harness)
    except (SyntaxError, ValueError, RecursionError):
        return ()
    fn = _check_function(tree)
    if fn is None:
        return ()
    body = fn.body
    first = body[0] if body else None
    if not (
        isinstance(first, ast.Assign) and len(first.targets) == 1 and isinstance(first.targets[0], ast.Name)
    ):
        return ()
    if not _loop_calls(fn, first.targets[0].id):
        return ()
    try:
        inputs = ast.literal_eval(first.value)
        if not (isinstance(inputs, list) and all(isinstance(i, list) for i in inputs)):
            return ()
        # the zip in the loop pairs each input with a result: the loop's length is the shorter one
        return tuple(encode((list(i), {}), 1 << 26) for i in inputs)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, CodecError):
        return ()
