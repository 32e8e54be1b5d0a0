"""Trusted-side, type-aware equality of decoded values (docs/algorithm.md, deviation D3).

Rules (``got`` is the value under test, ``expected`` the value it must equal): ``bool`` never equals
a number (``True != 1``); ``int`` and ``float`` compare numerically, with ``math.isclose(rel_tol,
abs_tol)`` only where the expected value is a float (evalplus applies its tolerance only to expected
floats), exactly as Python's ``==`` otherwise (``float(30000005) != 30000000``), and ``nan == nan``;
``complex`` with the tolerance where the expected value is a complex or a float; ``str`` and
``bytes`` exactly; ``list`` and ``tuple`` are interchangeable (as evalplus, which compares after
converting tuples) and compared element-wise; ``set``/``frozenset`` ignore order; ``dict`` compares
key sets and values per key; an :class:`ObjectState` (an object of a class written in Python)
equals only an object state with the same class qualified name and the same attribute names whose
values are equal by these rules (a :class:`CycleRef` equals a reference to the same enclosing
level); an :class:`Opaque` value (no inspectable state) equals only another opaque value with the
same type name and repr, and the grid does not count a test whose oracle value holds one
(:func:`contains_opaque`). Nothing here calls a method of an untrusted object: every value was
produced by :func:`codea1.sandbox.worker.value_codec.decode`.
"""

from __future__ import annotations

import cmath
import math
from typing import Any

from codea1.sandbox.worker.value_codec import CycleRef, ObjectState, Opaque

_SET_MATCH_LIMIT = 512
"""Largest set compared element-by-element with tolerance when exact matching fails."""


def contains_opaque(value: Any) -> bool:
    """True when ``value`` is, or contains, an :class:`Opaque` value."""
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is Opaque:
            return True
        if type(v) in (list, tuple, set, frozenset):
            stack.extend(v)
        elif type(v) is ObjectState:
            stack.extend(item for _, item in v.attrs)
        elif type(v) is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
    return False


def _is_number(v: Any) -> bool:
    return type(v) is int or type(v) is float


def _numbers_equal(a: int | float, b: int | float, rel_tol: float, abs_tol: float) -> bool:
    """``a`` (got) equals ``b`` (expected): with the tolerance only where ``b`` is a float."""
    if type(b) is int:
        return a == b  # exact, as Python compares an int with an int or a float
    try:
        fa, fb = float(a), float(b)
    except OverflowError:
        return False
    if math.isnan(fa) or math.isnan(fb):
        return math.isnan(fa) and math.isnan(fb)
    return math.isclose(fa, fb, rel_tol=rel_tol, abs_tol=abs_tol)


def _key(v: Any) -> Any:
    """A canonical, hashable, type-tagged form used to match dict keys and set elements exactly."""
    t = type(v)
    if t is bool:
        return ("bool", v)
    if t is int or t is float:
        if t is float and math.isnan(v):
            return ("nan",)
        return ("num", v)
    if t is complex:
        return ("complex", v)
    if t in (tuple, list):
        return ("seq", tuple(_key(x) for x in v))
    if t in (set, frozenset):
        return ("set", frozenset(_key(x) for x in v))
    if t is dict:
        return ("dict", frozenset((_key(k), _key(x)) for k, x in v.items()))
    if t is ObjectState:
        return ("object", v.qualname, tuple((name, _key(x)) for name, x in v.attrs))
    return (t.__name__, v)


def values_equal(a: Any, b: Any, rel_tol: float = 1e-6, abs_tol: float = 1e-6, _depth: int = 0) -> bool:
    """Type-aware equality of ``a`` (the value got) and ``b`` (the value expected), two decoded values
    (see the module docstring for the rules; the float tolerance applies where ``b`` holds a float)."""
    if _depth > 400:
        return False
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if _is_number(a) and _is_number(b):
        return _numbers_equal(a, b, rel_tol, abs_tol)
    if ta is complex or tb is complex:
        if ta not in (int, float, complex) or tb not in (int, float, complex):
            return False
        ca, cb = complex(a), complex(b)
        if cmath.isnan(ca) or cmath.isnan(cb):
            return cmath.isnan(ca) and cmath.isnan(cb)
        if tb is int:
            return a == b
        return cmath.isclose(ca, cb, rel_tol=rel_tol, abs_tol=abs_tol)
    if ta in (list, tuple) and tb in (list, tuple):
        return len(a) == len(b) and all(
            values_equal(x, y, rel_tol, abs_tol, _depth + 1) for x, y in zip(a, b, strict=True)
        )
    if ta in (set, frozenset) and tb in (set, frozenset):
        return _sets_equal(a, b, rel_tol, abs_tol, _depth)
    if ta is dict and tb is dict:
        return _dicts_equal(a, b, rel_tol, abs_tol, _depth)
    if ta is ObjectState or tb is ObjectState:
        return ta is tb and _objects_equal(a, b, rel_tol, abs_tol, _depth)
    if ta is CycleRef or tb is CycleRef:
        return ta is tb and a.up == b.up
    if ta is Opaque or tb is Opaque:
        return ta is tb and a == b
    if a is None or b is None:
        return a is None and b is None
    if ta is tb and ta in (str, bytes):
        return bool(a == b)
    return False


def _objects_equal(a: ObjectState, b: ObjectState, rel_tol: float, abs_tol: float, depth: int) -> bool:
    if a.qualname != b.qualname or len(a.attrs) != len(b.attrs):
        return False
    return all(
        na == nb and values_equal(va, vb, rel_tol, abs_tol, depth + 1)
        for (na, va), (nb, vb) in zip(a.attrs, b.attrs, strict=True)
    )


def _sets_equal(a: Any, b: Any, rel_tol: float, abs_tol: float, depth: int) -> bool:
    if len(a) != len(b):
        return False
    if {_key(x) for x in a} == {_key(y) for y in b}:
        return True
    if len(a) > _SET_MATCH_LIMIT:
        return False
    remaining = list(b)
    for x in a:
        for i, y in enumerate(remaining):
            if values_equal(x, y, rel_tol, abs_tol, depth + 1):
                del remaining[i]
                break
        else:
            return False
    return True


def _dicts_equal(a: dict[Any, Any], b: dict[Any, Any], rel_tol: float, abs_tol: float, depth: int) -> bool:
    if len(a) != len(b):
        return False
    b_by_key = {_key(k): v for k, v in b.items()}
    if len(b_by_key) != len(b):
        return False
    for k, v in a.items():
        kk = _key(k)
        if kk not in b_by_key or not values_equal(v, b_by_key[kk], rel_tol, abs_tol, depth + 1):
            return False
    return True
