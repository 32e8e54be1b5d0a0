"""Where a grid test's expression runs: the worker's half of the test-side guard.

A generated test must judge the function under test by its behaviour only (the host's half,
:mod:`codea1.sandbox.test_guard`, refuses every test that reaches the function object, its code or
the interpreter by name, and never runs it). Here, in the test child, three things hold for
whatever that check misses:

* **Its own namespace.** The expression is evaluated in a shallow copy of the program's namespace,
  so a name it binds (``:=``) never reaches the program's functions, whose globals stay the
  program's own.
* **The entry point is a guard.** In that copy the entry point's name is bound to a trusted
  function that calls the program's entry point; the expression never holds the function itself,
  so ``f.__code__`` or ``inspect.signature(f)`` would read the same guard in every program. What
  the guard returns is the value rebuilt by trusted code (:mod:`codea1.sandbox.worker.rebuilt`):
  no method of the program's value decides a comparison the expression makes.
* **Trusted builtins.** The copy's builtins are :data:`TRUSTED_BUILTINS`, and program names that
  shadow a builtin are left out of it: a test's ``sorted`` is the interpreter's.
* **The question's own helpers.** The question's imports and helper functions (trusted source,
  ``GridJob.question_helpers``) are executed before the program by :func:`question_namespace`; in
  the copy they replace the program's names, each function bound to the copy as its globals: a
  test's ``is_sorted(f(x))`` runs the question's ``is_sorted``, not a candidate's redefinition (the
  candidate's own code still calls its own: that is its behaviour).
* **State checked before each call.** An expression that names anything beyond a set of pure
  builtins and the entry point is checked before each call of the entry point, and once more
  before its value is encoded: every module's namespace (``builtins`` included; names added
  since are allowed), the program's namespace, and the interpreter's settings (recursion limit,
  int-string digits, trace and profile functions, rlimits, signal handlers and timers, decimal
  context) must be what the program left them. What the entry point itself changes while it runs
  is the program's own doing: the state is taken again when each call returns. A change is
  reported as the test raising ``test changed interpreter state (...)``: ``invalid`` on the
  oracle, ``error`` for a candidate (so a candidate can never use it to dodge a test).

Each guard frame is compensated in the recursion limit, so a recursive entry point reaches the
same depth as when the expression called it directly; so is each frame the test stacked before
the call (a lambda, a comprehension, its own recursion): the entry point always gets the room a
call written in the expression gets. The checker's helpers are bound when this
module is imported (default arguments), so patching builtins or this module cannot blind it.
"""

from __future__ import annotations

import ast
import builtins
import gc
import operator
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from types import CodeType, FunctionType, ModuleType
from typing import Any

from codea1.sandbox.worker.rebuilt import rebuild

SAFE_NAMES = frozenset(
    "abs all any ascii bin bool bytearray bytes callable chr complex dict divmod enumerate filter float "
    "frozenset hex int isinstance issubclass iter len list map max min next oct ord pow print range repr "
    "reversed round set slice sorted str sum tuple zip".split()
)
"""Builtins an expression may name (besides the entry point) and still need no state check: none
of them can reach a module, a namespace or an interpreter setting."""


TRUSTED_BUILTINS: dict[str, Any] = dict(vars(builtins))
"""The builtins a test expression sees: a copy taken when the worker starts, before any program runs.
A program's own ``sorted`` (a module-level name, or ``builtins.sorted`` replaced while it loads) is
never the one a test calls; the entry point itself still runs with the program's own."""


def question_namespace(source: str) -> dict[str, Any]:
    """The names the question's trusted ``source`` (its imports and helper functions) binds, executed
    statement by statement with :data:`TRUSTED_BUILTINS`; a statement that raises (a module the
    sandbox lacks) binds nothing. Run it once per program process, before the program's definitions,
    so nothing the program does while it loads changes what these names are bound to."""
    if not source:
        return {}
    ns: dict[str, Any] = {"__name__": "__question__", "__builtins__": TRUSTED_BUILTINS}
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    for stmt in body:
        try:
            exec(compile(ast.Module([stmt], []), "<question>", "exec"), ns)  # noqa: S102 - trusted source
        except Exception:  # noqa: BLE001, S112 - what cannot be bound stays the program's
            continue
    return {k: v for k, v in ns.items() if not (k.startswith("__") and k.endswith("__"))}


def _rebound(value: Any, scope: dict[str, Any], _function: Any = FunctionType, _type: Any = type) -> Any:
    """``value``, a question helper, as the test sees it: a plain function is rebuilt (no compile)
    with the test's namespace as its globals, so the names it uses resolve as the test's do (other
    helpers and imports of the question, the program's classes); anything else as it is."""
    if _type(value) is not _function:
        return value
    fn = _function(value.__code__, scope, value.__name__, value.__defaults__, value.__closure__)
    fn.__kwdefaults__ = value.__kwdefaults__
    return fn


class StateChanged(BaseException):
    """The test changed the interpreter's state before calling the entry point."""


_RLIMITS = (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_STACK, resource.RLIMIT_NOFILE,
            resource.RLIMIT_FSIZE, resource.RLIMIT_DATA)  # fmt: skip
_SIGNALS = (signal.SIGPROF, signal.SIGXCPU, signal.SIGALRM, signal.SIGVTALRM)
_MONITORING = getattr(sys, "monitoring", None)


def _settings(
    _sys: Any = sys, _gc: Any = gc, _rl: Any = resource.getrlimit, _sig: Any = signal.getsignal,
    _timer: Any = signal.getitimer, _cwd: Any = os.getcwd, _tuple: Any = tuple, _map: Any = map,
    _mon: Any = _MONITORING, _range: Any = range,
) -> tuple[Any, ...]:  # fmt: skip
    """The interpreter settings a test could change to make the entry point behave otherwise."""
    decimal = _sys.modules.get("decimal")
    ctx: Any = ()
    if decimal is not None:
        c = decimal.getcontext()
        ctx = (c, c.prec, c.rounding, c.Emin, c.Emax, c.capitals, c.clamp, _tuple(c.traps.values()))
    return (
        _sys.getrecursionlimit(), _sys.get_int_max_str_digits(), _sys.gettrace(), _sys.getprofile(),
        _gc.isenabled(), _gc.get_threshold(), _tuple(_map(_rl, _RLIMITS)), _tuple(_map(_sig, _SIGNALS)),
        _timer(signal.ITIMER_REAL)[0] > 0, _timer(signal.ITIMER_VIRTUAL)[0] > 0, _cwd(), ctx,
        _tuple(_map(_mon.get_tool, _range(6))) if _mon is not None else (),
    )  # fmt: skip


def _same(a: tuple[Any, ...], b: tuple[Any, ...], _is: Any = operator.is_, _all: Any = all, _map: Any = map,
          _len: Any = len, _type: Any = type, _tuple: Any = tuple) -> bool:  # fmt: skip
    """Settings tuples equal: numbers and text by value, everything else by identity."""
    if _len(a) != _len(b):
        return False
    for x, y in zip(a, b):  # noqa: B905 - same length
        if _type(x) is _tuple and _type(y) is _tuple:
            if not _same(x, y):
                return False
        elif _type(x) in (int, float, str, bool) and _type(y) is _type(x):
            if x != y:
                return False
        elif not _is(x, y):
            return False
    return True


Modules = list[tuple[str, Any, dict[str, Any], tuple[str, ...], tuple[Any, ...]]]


def take_modules(
    ns: dict[str, Any], _sys: Any = sys, _tuple: Any = tuple, _module: Any = ModuleType,
    question: dict[str, Any] | None = None,
) -> Modules:  # fmt: skip
    """The namespaces a test could change under the entry point: ``builtins``, ``sys``, and every
    module the program's namespace (or the question's, ``question``) holds (name, module, dict,
    keys, values). Only exact modules are
    read (a module's ``__dict__`` runs no code). Deeper modules are left to the host's check: a test
    reaches them only through attributes it may not name. (Reading every loaded module would cost
    about 3 ms per test: each value read dirties a copy-on-write page.)"""
    mods = {"builtins": builtins, "sys": _sys}
    for v in (*_tuple(ns.values()), *_tuple((question or {}).values())):
        if type(v) is _module:
            mods[v.__name__ if type(v.__name__) is str else "?"] = v
    return [
        (name, mod, mod.__dict__, _tuple(mod.__dict__), _tuple(mod.__dict__.values()))
        for name, mod in mods.items()
    ]


def _prefix_same(d: dict[str, Any], keys: tuple[str, ...], vals: tuple[Any, ...], _is: Any = operator.is_,
                 _all: Any = all, _map: Any = map, _len: Any = len) -> bool:  # fmt: skip
    """``d`` still holds ``keys`` → ``vals`` (same objects, same order); keys added after them are allowed."""
    return _len(d) >= _len(keys) and _all(_map(_is, keys, d)) and _all(_map(_is, vals, d.values()))


def _module_change(mods: Modules, _sys: Any = sys, _prefix: Any = _prefix_same) -> str:
    modules = _sys.modules
    for name, mod, d, keys, vals in mods:
        if name in ("builtins", "sys") and modules.get(name) is not mod:
            return f"sys.modules[{name!r}] replaced"
        if not _prefix(d, keys, vals):
            return f"{name}.{_first_difference(d, keys, vals)}"
    return ""


def _first_difference(d: dict[str, Any], keys: tuple[str, ...], vals: tuple[Any, ...]) -> str:
    for k, v in zip(keys, vals):  # noqa: B905 - same length
        if k not in d or d[k] is not v:
            return str(k)[:60]
    return "(order)"


class TestScope:
    """The test-side guard of one program: made in P after the definitions, used in each test child."""

    def __init__(self, ns: dict[str, Any], entry_point: str, question: dict[str, Any] | None = None) -> None:
        self.ns = ns
        self.entry_point = entry_point
        self.question = {k: v for k, v in (question or {}).items() if k != entry_point}
        """The question's own names (:func:`question_namespace`), taken in place of the program's."""
        self.modules: Modules = []
        self.ns_keys: tuple[str, ...] = ()
        self.ns_vals: tuple[Any, ...] = ()
        self.settings: tuple[Any, ...] = ()
        self.cpu = (0.0, 0.0)
        self.violation = ""
        self.checked = False

    def needs_check(self, code: CodeType) -> bool:
        """True when ``code`` (or a function or comprehension inside it) names anything but
        :data:`SAFE_NAMES` and the entry point."""
        stack = [code]
        while stack:
            c = stack.pop()
            if not all(n in SAFE_NAMES or n == self.entry_point for n in c.co_names):
                return True
            stack.extend(k for k in c.co_consts if isinstance(k, CodeType))
        return False

    def namespace(self, code: CodeType) -> dict[str, Any]:
        """The namespace ``code`` is evaluated in. Call it in the test child, after the CPU budget is
        set and before any test code runs: the state it takes is then the program's as it loaded."""
        self.checked = self.needs_check(code)
        self.retake()
        scope = {k: v for k, v in self.ns.items() if k not in TRUSTED_BUILTINS or k == "__name__"}
        scope["__builtins__"] = TRUSTED_BUILTINS
        for k, v in self.question.items():
            scope[k] = _rebound(v, scope)
        scope[self.entry_point] = _guard(self, self.ns, self.entry_point, _GUARD_FRAMES, top=code)
        return scope

    def change(self, _settings: Callable[[], tuple[Any, ...]] = _settings, _same: Any = _same,
               _modules: Any = _module_change, _prof: Any = signal.getitimer, _cpu: Any = time.process_time,
               _prefix: Any = _prefix_same, _len: Any = len) -> str:  # fmt: skip
        """What the test changed since the state was last taken ("" when nothing); with no check needed, ""."""
        if not self.checked:
            return ""
        ns = self.ns
        if not _prefix(ns, self.ns_keys, self.ns_vals):
            return f"program global {_first_difference(ns, self.ns_keys, self.ns_vals)}"
        if _len(ns) != _len(self.ns_keys):
            added = [k for k in ns if k not in self.ns_keys and not (k.startswith("__") and k.endswith("__"))]
            if added:
                return f"program global {str(added[0])[:60]} added"
        what = _modules(self.modules)
        if what:
            return what
        if not _same(self.settings, _settings()):
            return "interpreter settings"
        left, cpu = self.cpu
        if left > 0 and abs(_prof(signal.ITIMER_PROF)[0] - (left - (_cpu() - cpu))) > 0.1:
            return "CPU timer"
        return ""

    def retake(self) -> None:
        """Take the state again (after a call of the entry point: what it changed is the program's)."""
        if self.checked:
            self.modules = take_modules(self.ns, question=self.question)
            self.ns_keys, self.ns_vals = tuple(self.ns), tuple(self.ns.values())
            self.settings = _settings()
            self.cpu = (signal.getitimer(signal.ITIMER_PROF)[0], time.process_time())

    def record(self, what: str) -> None:
        """Remember the first change seen ("" is no change)."""
        if what and not self.violation:
            self.violation = f"test changed interpreter state ({what})"[:300]

    def refuse(self, what: str) -> None:
        """Record the change and stop the test."""
        self.record(what)
        raise StateChanged(self.violation)


def _test_frames(top: CodeType | None, cap: int, _getframe: Any = sys._getframe) -> int:
    """How many frames the test stacked between its own expression (the frame running ``top``) and
    the guard's caller: 0 for a call written in the expression, 1 from a lambda of it, and so on
    (0 when no frame runs ``top``; at most ``cap``). The guard adds them to the recursion limit, so a
    test that recursed first cannot leave a recursive entry point less room."""
    if top is None:
        return 0
    frame, n = _getframe(2), 0
    while frame is not None and frame.f_code is not top:
        if n >= cap:
            return cap
        frame, n = frame.f_back, n + 1
    return n if frame is not None else 0


def _guard(
    scope: TestScope, ns: dict[str, Any], name: str, frames: int, _sys: Any = sys,
    top: CodeType | None = None, _below: Any = _test_frames, _rebuild: Any = rebuild,
) -> Callable[..., Any]:  # fmt: skip
    """The entry point as a test sees it: checks the state, calls ``ns[name]``, and returns the value
    rebuilt by trusted code (:func:`codea1.sandbox.worker.rebuilt.rebuild`), never the object itself."""

    change, refuse, retake = scope.change, scope.refuse, scope.retake  # bound now: patching the class is moot

    def entry(*args: Any, **kwargs: Any) -> Any:
        what = change()
        if what:
            refuse(what)
        try:
            fn = ns[name]
        except KeyError:
            raise NameError(f"name {name!r} is not defined") from None
        limit = _sys.getrecursionlimit()
        raised = limit + frames + _below(top, limit)  # the depth the test's own frames took, given back
        _sys.setrecursionlimit(raised)
        try:
            value = fn(*args, **kwargs)
        finally:
            if _sys.getrecursionlimit() == raised:  # unless the entry point set its own
                _sys.setrecursionlimit(limit)
            retake()
        return _rebuild(value)

    return entry


def _guard_frames() -> int:
    """How many recursion levels a guard adds between the expression and the entry point."""

    def down(n: int) -> int:
        try:
            return down(n + 1)
        except RecursionError:
            return n

    class _Probe(TestScope):
        def __init__(self) -> None:
            self.checked = False

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        direct = eval("down(0)", {"down": down})  # noqa: S307 - trusted constant expression
        guarded = eval("down(0)", {"down": _guard(_Probe(), {"down": down}, "down", 0)})  # noqa: S307
    finally:
        sys.setrecursionlimit(limit)
    return max(direct - guarded, 0)


_GUARD_FRAMES = _guard_frames()
