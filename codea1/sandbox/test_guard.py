"""Which generated tests test behaviour only: the static half of the test-side guard (trusted side).

A test's call expression runs in the reference's program and in each candidate's. It may compute
its inputs with anything Python allows (helper values, comprehensions, the program's classes), but
not from the function under test or from the interpreter: a test such as
``f(len(f.__code__.co_code))`` or one that replaces ``builtins.sum`` before calling ``f`` passes on
the reference and fails a correct candidate written differently. :func:`refusal` names what makes
a call expression such a test; the grid planner (:mod:`codea1.sandbox.grid`) never runs it and
makes its oracle ``invalid`` with that reason.

The rules (docs/sandbox.md, "Tests judge behaviour only"):

* the entry point may only be called (``f(x)``, ``obj.f(x)``), never used as a value;
* no special name (``__builtins__``, ``__import__``) and no attribute that starts with ``_``
  (``.__code__``, ``.__defaults__``, ``.__globals__``, ``._getframe``, ``.__traceback__``);
* no attribute of a frame, traceback or code object, or of the generator or coroutine holding one
  (``.gi_frame``, ``.f_globals``, ``.f_back``, ``.tb_frame``, ``.co_code``: :data:`INTERNALS`);
* no introspection or dynamic-code builtin (``globals``, ``vars``, ``getattr``, ``eval``, ``id``,
  ...) and no name or attribute that reaches interpreter state (``sys``, ``builtins``,
  ``inspect``, ``gc``, ``os``, ``signal``, ``str.format``'s field lookups, ...);
* a comprehension may bind names only (not ``for m.attr in ...``), and ``type`` may not build a
  class;
* ``is`` / ``is not`` only against ``None``, ``True``, ``False`` or ``...`` (object identity is
  not behaviour).

The worker's half (:mod:`codea1.sandbox.worker.test_scope`) holds whatever this one misses: each
test runs in its own copy of the namespace, sees the entry point only through a guard, and is
refused when it changed the interpreter's state before a call.
"""

from __future__ import annotations

import ast
import warnings

INTROSPECTION = frozenset(
    "globals locals vars dir getattr setattr delattr hasattr eval exec compile breakpoint open input "
    "help exit quit id memoryview".split()
)
"""Builtins that read or change namespaces, run code from text, or expose identity."""
STATE = frozenset(
    "sys builtins bltns inspect gc importlib ctypes types os posix nt signal resource threading "
    "marshal pickle copyreg weakref atexit faulthandler tracemalloc dis codeop modules "
    "setrecursionlimit settrace setprofile set_int_max_str_digits getcontext setcontext localcontext "
    "attrgetter methodcaller format format_map Formatter".split()
)
"""Names and attributes that reach the interpreter's state or read attributes by name at run time."""
INTERNALS = ("gi_", "cr_", "ag_", "f_", "tb_", "co_")
"""Prefixes of the attributes of frames (``f_globals``, ``f_back``, ``f_builtins``), tracebacks
(``tb_frame``), code objects (``co_code``) and of the generators, coroutines and async generators that
hold them (``gi_frame``, ``cr_frame``, ``ag_frame``): from any of them a test reaches the program's
globals, the real builtins or the process's own frames."""
_TARGETS = (ast.Name, ast.Tuple, ast.List, ast.Starred)


def refusal(call: str, entry_point: str) -> str:
    """Why the test call expression ``call`` does not judge ``entry_point`` by behaviour alone
    ("" when it does)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(call, mode="eval")
    except (SyntaxError, ValueError):
        return "test does not parse"
    nodes = list(ast.walk(tree))
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    for node in nodes:
        if _name(node) == entry_point and id(node) not in called:
            return f"test uses {entry_point} other than by calling it"
    for node in nodes:
        reason = _node_refusal(node)
        if reason:
            return reason
    return ""


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def _node_refusal(node: ast.AST) -> str:
    if isinstance(node, ast.Name | ast.Attribute):
        name = _name(node)
        if isinstance(node, ast.Name) and name.startswith("__"):
            return f"test uses the special name {name}"
        if isinstance(node, ast.Attribute) and name.startswith("_"):
            return f"test reads the attribute .{name}"
        if isinstance(node, ast.Attribute) and name.startswith(INTERNALS):
            return f"test reaches interpreter internals (.{name})"
        if name in INTROSPECTION:
            return f"test uses introspection ({name})"
        if name in STATE:
            return f"test reaches interpreter state ({name})"
    elif isinstance(node, ast.comprehension):
        if not all(isinstance(t, _TARGETS) for t in ast.walk(node.target) if isinstance(t, ast.expr)):
            return "test assigns to an attribute or an item"
    elif isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) > 1:
            return "test defines a class"
    elif isinstance(node, ast.Compare) and _compares_identity(node):
        return "test compares identities (is)"
    return ""


def _compares_identity(node: ast.Compare) -> bool:
    """``a is b`` / ``a is not b`` where neither side is ``None``, ``True``, ``False`` or ``...``:
    whether two values are one object is not behaviour (a cache, an interned small int)."""
    sides = [node.left, *node.comparators]
    return any(
        isinstance(op, ast.Is | ast.IsNot) and not (_singleton(sides[i]) or _singleton(sides[i + 1]))
        for i, op in enumerate(node.ops)
    )


def _singleton(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and any(node.value is c for c in (None, True, False, ...))
