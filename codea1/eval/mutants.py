"""AST mutants of a reference solution, for the mutation score of generated tests (mut@k).

Seven operator kinds, each a small syntactic change at one site:
arithmetic (``+``↔``-``, ``*``↔``/``, ``//``→``/``, ``%``→``//``, ``**``→``*``, shifts, bit ops, unary
minus dropped), comparison (``<``↔``<=``, ``>``↔``>=``, ``==``↔``!=``, ``in``↔``not in``, ``is``↔``is not``),
boolean (``and``↔``or``, ``not`` dropped, ``True``↔``False``, ``if``/``while`` condition negated), constant
(number ``c`` → ``c + 1`` and → ``0``/``1``, string → empty / ``"X"``), return-value (``return e`` →
``return None``), slice (a bound or the step removed) and call (``f(x)`` → ``x``, first two arguments
swapped). Docstrings are never mutated. A mutant whose source equals the original (after
``ast.unparse``) or another mutant is dropped. Every mutant parses.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

MutantKind = Literal["arithmetic", "comparison", "boolean", "constant", "return", "slice", "call"]
MUTANT_KINDS: tuple[MutantKind, ...] = (
    "arithmetic",
    "comparison",
    "boolean",
    "constant",
    "return",
    "slice",
    "call",
)

_ARITH: dict[type, tuple[type, ...]] = {
    ast.Add: (ast.Sub,),
    ast.Sub: (ast.Add,),
    ast.Mult: (ast.Div,),
    ast.Div: (ast.Mult,),
    ast.FloorDiv: (ast.Div,),
    ast.Mod: (ast.FloorDiv,),
    ast.Pow: (ast.Mult,),
    ast.LShift: (ast.RShift,),
    ast.RShift: (ast.LShift,),
    ast.BitAnd: (ast.BitOr,),
    ast.BitOr: (ast.BitAnd,),
    ast.BitXor: (ast.BitOr,),
}
_COMPARE: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}


@dataclass(frozen=True)
class Mutant:
    """One mutated program: its kind, a short description of the change, and its source.

    ``kind`` is one of :data:`MUTANT_KINDS` here, a Cosmic-Ray operator family in
    ``codea1.eval.cosmic_mutants``."""

    kind: str
    description: str
    source: str


class _Mutator(ast.NodeTransformer):
    """Enumerates mutation sites in a fixed traversal order; applies the one numbered ``target``."""

    def __init__(self, target: int, skip: set[int]):
        self.target = target
        self.skip = skip
        self.sites: list[tuple[MutantKind, str]] = []

    def _offer(
        self, kind: MutantKind, desc: str, node: ast.AST, make: Callable[[], ast.AST]
    ) -> ast.AST | None:
        index = len(self.sites)
        self.sites.append((kind, f"line {getattr(node, 'lineno', '?')}: {desc}"))
        return make() if index == self.target else None

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        for new in _ARITH.get(type(node.op), ()):
            desc = f"{type(node.op).__name__} -> {new.__name__}"
            got = self._offer(
                "arithmetic", desc, node, lambda new=new: ast.BinOp(node.left, new(), node.right)
            )
            if got is not None:
                return got
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        for new in _ARITH.get(type(node.op), ()):
            desc = f"{type(node.op).__name__}= -> {new.__name__}="
            got = self._offer(
                "arithmetic", desc, node, lambda new=new: ast.AugAssign(node.target, new(), node.value)
            )
            if got is not None:
                return got
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.USub):
            got = self._offer("arithmetic", "unary minus removed", node, lambda: node.operand)
            if got is not None:
                return got
        if isinstance(node.op, ast.Not):
            got = self._offer("boolean", "not removed", node, lambda: node.operand)
            if got is not None:
                return got
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            new = _COMPARE.get(type(op))
            if new is None:
                continue

            def make(i: int = i, new: type = new) -> ast.AST:
                ops = list(node.ops)
                ops[i] = new()
                return ast.Compare(node.left, ops, node.comparators)

            got = self._offer("comparison", f"{type(op).__name__} -> {new.__name__}", node, make)
            if got is not None:
                return got
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        got = self._offer(
            "boolean",
            f"{type(node.op).__name__} -> {new.__name__}",
            node,
            lambda: ast.BoolOp(new(), node.values),
        )
        return node if got is None else got

    def _negate_test(self, node: ast.If | ast.While) -> ast.AST:
        self.generic_visit(node)

        def make() -> ast.AST:
            new = copy.copy(node)
            new.test = ast.UnaryOp(ast.Not(), node.test)
            return new

        got = self._offer("boolean", f"{type(node).__name__.lower()} condition negated", node, make)
        return node if got is None else got

    def visit_If(self, node: ast.If) -> ast.AST:
        return self._negate_test(node)

    def visit_While(self, node: ast.While) -> ast.AST:
        return self._negate_test(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if id(node) in self.skip:
            return node
        v = node.value
        variants: list[tuple[MutantKind, str, object]] = []
        if isinstance(v, bool):
            variants.append(("boolean", f"{v} -> {not v}", not v))
        elif isinstance(v, (int, float)):
            variants.append(("constant", f"{v!r} -> {v + 1!r}", v + 1))
            zero = type(v)(1 if v == 0 else 0)
            variants.append(("constant", f"{v!r} -> {zero!r}", zero))
        elif isinstance(v, str):
            variants.append(("constant", f"{v[:20]!r} -> {'X' if not v else ''!r}", "X" if not v else ""))
        for kind, desc, value in variants:
            got = self._offer(kind, desc, node, lambda value=value: ast.Constant(value))
            if got is not None:
                return got
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        self.generic_visit(node)
        if node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None):
            return node
        got = self._offer("return", "return value -> None", node, lambda: ast.Return(ast.Constant(None)))
        return node if got is None else got

    def visit_Slice(self, node: ast.Slice) -> ast.AST:
        self.generic_visit(node)
        for part in ("lower", "upper", "step"):
            if getattr(node, part) is None:
                continue

            def make(part: str = part) -> ast.AST:
                new = copy.copy(node)
                setattr(new, part, None)
                return new

            got = self._offer("slice", f"slice {part} removed", node, make)
            if got is not None:
                return got
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        plain = not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args)
        if plain and len(node.args) == 1:
            got = self._offer("call", f"call {ast.unparse(node.func)}(x) -> x", node, lambda: node.args[0])
            if got is not None:
                return got
        if plain and len(node.args) >= 2:

            def make() -> ast.AST:
                args = [node.args[1], node.args[0], *node.args[2:]]
                return ast.Call(node.func, args, node.keywords)

            got = self._offer(
                "call", f"call {ast.unparse(node.func)}: first two arguments swapped", node, make
            )
            if got is not None:
                return got
        return node


def _docstring_ids(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    ids.add(id(first.value))
    return ids


def _apply(source: str, target: int) -> tuple[str | None, list[tuple[MutantKind, str]]]:
    tree = ast.parse(source)
    mutator = _Mutator(target, _docstring_ids(tree))
    new_tree = ast.fix_missing_locations(mutator.visit(tree))
    if target < 0:
        return None, mutator.sites
    return ast.unparse(new_tree), mutator.sites


def mutation_sites(source: str) -> int:
    """How many single-site mutations :func:`mutant_at` can apply to ``source`` (``SyntaxError`` if it
    does not parse): one traversal, no mutant built."""
    return len(site_kinds(source))


def site_kinds(source: str) -> tuple[MutantKind, ...]:
    """The kind of each site of :func:`mutant_at`, in site order (``SyntaxError`` if ``source`` does
    not parse): one traversal, no mutant built."""
    return tuple(kind for kind, _ in _apply(source, -1)[1])


def mutant_at(source: str, site: int) -> str | None:
    """``source`` with the mutation of site ``site`` (``0 <= site < mutation_sites(source)``), as
    ``ast.unparse`` writes it plus a newline; None when that equals the original or does not parse.
    Builds one mutant, where :func:`generate_mutants` builds them all."""
    text, _ = _apply(source, site)
    if text is None or text == ast.unparse(ast.parse(source)):
        return None
    try:
        ast.parse(text)
    except SyntaxError:
        return None
    return text + "\n"


def generate_mutants(source: str, limit: int = 0) -> list[Mutant]:
    """All distinct single-site mutants of ``source`` (``SyntaxError`` if it does not parse).

    With ``limit`` > 0, at most ``limit`` mutants are kept, taken round-robin across the kinds in
    source order, so every kind present is represented. Deterministic.
    """
    original = ast.unparse(ast.parse(source))
    _, sites = _apply(source, -1)
    seen = {original}
    by_kind: dict[MutantKind, list[Mutant]] = {k: [] for k in MUTANT_KINDS}
    for i, (kind, desc) in enumerate(sites):
        text, _ = _apply(source, i)
        if text is None or text in seen:
            continue
        try:
            ast.parse(text)
        except SyntaxError:
            continue
        seen.add(text)
        by_kind[kind].append(Mutant(kind, desc, text + "\n"))
    ordered: list[Mutant] = []
    queues = [list(v) for v in by_kind.values() if v]
    while queues:
        for q in queues:
            ordered.append(q.pop(0))
        queues = [q for q in queues if q]
    if limit > 0:
        ordered = ordered[:limit]
    return ordered
