"""Seeded extra calls of a function with arguments of the types its golden calls use.

The training-mutant draw (docs/algorithm.md, D12) asks whether a training mutant behaves like an
evaluation mutant; the golden tests' calls alone are few (often three or four), so they are joined
by new calls whose arguments have the golden arguments' types: ``f(3, [1, 2])`` gives ``f(-7, [0,
4, -2])`` and the like. Only literal arguments are varied (``ast.literal_eval``); a call with
anything else (a name, keyword arguments, a starred argument) gives no extra call.

Pure: ``random`` and ``ast`` only, deterministic in its seed.
"""

from __future__ import annotations

import ast
import random
import string
from collections.abc import Sequence
from typing import Any

_CHARS = string.ascii_letters + string.digits + " "


def extra_calls(calls: Sequence[str], entry_point: str, seed: str, per_call: int = 2) -> list[str]:
    """Up to ``per_call`` new calls of ``entry_point`` for each of ``calls`` whose arguments are
    literals, each argument drawn afresh with the type (and, for containers, the element types) of
    the golden argument; distinct, none of them one of ``calls``, in order. Deterministic in ``seed``."""
    rng = random.Random(seed)
    seen = set(calls)
    out: list[str] = []
    for call in calls:
        args = _literal_args(call, entry_point)
        if args is None:
            continue
        for _ in range(per_call):
            text = f"{entry_point}({', '.join(repr(_like(a, rng, 0)) for a in args)})"
            if text not in seen:
                seen.add(text)
                out.append(text)
    return out


def _literal_args(call: str, entry_point: str) -> list[Any] | None:
    try:
        node = ast.parse(call, mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point):
        return None
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        return None
    try:
        return [ast.literal_eval(a) for a in node.args]
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _like(value: Any, rng: random.Random, depth: int) -> Any:
    """A fresh value of ``value``'s type (bool before int: a bool is an int in Python)."""
    if isinstance(value, bool):
        return rng.random() < 0.5
    if isinstance(value, int):
        return rng.randint(-10, 10) if rng.random() < 0.8 else rng.randint(-1000, 1000)
    if isinstance(value, float):
        return round(rng.uniform(-10.0, 10.0), 2)
    if isinstance(value, str):
        chars = sorted(set(value) | set(_CHARS))
        return "".join(rng.choice(chars) for _ in range(rng.randint(0, max(6, len(value)))))
    if isinstance(value, (list, tuple, set, frozenset)) and depth < 3:
        items = list(value) or [0]
        made = [_like(rng.choice(items), rng, depth + 1) for _ in range(rng.randint(0, 5))]
        if isinstance(value, (set, frozenset)):
            try:
                return type(value)(made)
            except TypeError:  # unhashable elements cannot come from a set's own elements
                return value
        return type(value)(made)
    if isinstance(value, dict) and value and depth < 3:
        keys, values = list(value), list(value.values())
        made = {}
        for _ in range(rng.randint(0, 4)):
            try:
                made[_like(rng.choice(keys), rng, depth + 1)] = _like(rng.choice(values), rng, depth + 1)
            except TypeError:
                return value
        return made
    return value  # None, bytes, complex, nested too deep: as given
