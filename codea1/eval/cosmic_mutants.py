"""Mutants made by Cosmic-Ray's operators (the ``cosmic-ray`` package, 8.x), used as a library.

UnLeakedTestBench measures Mut@k with Cosmic-Ray: ``cosmic-ray init`` enumerates, for every
operator that takes no arguments (211 in 8.7: each binary operator to each other one, each
comparison to each other one, unary operators, ``True``/``False``, ``and``/``or``, ``break``/
``continue``, exception types, numbers, decorators, zero-iteration ``for``), every position where
it applies, and each (operator, occurrence) is one mutant. Here the same enumeration runs on the
function's source through Cosmic-Ray's parso-based API (``cosmic_ray.ast``, ``mutating.mutate_code``);
Cosmic-Ray's session database, its test runner and its process handling are not used: the mutants
are programs like any candidate, run in codea1's sandbox.

A ULT function has about 230 such mutants (ULT-Lite: up to 920), so ``limit`` keeps a uniform
sample, seeded by the source, in enumeration order: the killed share of a uniform sample estimates
the killed share over all mutants, which is what ULT reports. A mutant that does not compile or
equals the original is dropped (Cosmic-Ray would count the first as incompetent).
"""

from __future__ import annotations

import hashlib
import random
import warnings
from typing import Any

from codea1.eval.mutants import Mutant


class MutantsUnavailable(RuntimeError):
    """The ``cosmic-ray`` package is not installed."""


def _library() -> tuple[Any, Any, Any]:
    try:
        import cosmic_ray.plugins as plugins
        from cosmic_ray.ast import ast_nodes, get_ast
        from cosmic_ray.mutating import mutate_code
    except ImportError:
        raise MutantsUnavailable(
            "Cosmic-Ray's mutation operators need the cosmic-ray package: pip install 'codea1[ult]' "
            "(or use --mutants ast)"
        ) from None
    return plugins, (ast_nodes, get_ast), mutate_code


def operator_names() -> tuple[str, ...]:
    """The operators ``cosmic-ray init`` uses without configuration (those that take no arguments)."""
    plugins, _, _ = _library()
    return tuple(n for n in plugins.operator_names() if not plugins.get_operator(n).arguments())


def positions(source: str) -> list[tuple[str, int, int]]:
    """Every ``(operator, occurrence, line)`` of ``source``, in Cosmic-Ray's enumeration order."""
    plugins, (ast_nodes, get_ast), _ = _library()
    nodes = list(ast_nodes(get_ast(source)))
    out: list[tuple[str, int, int]] = []
    for name in operator_names():
        op = plugins.get_operator(name)()
        found = [start for node in nodes for start, _ in op.mutation_positions(node)]
        out.extend((name, i, start[0]) for i, start in enumerate(found))
    return out


def _family(name: str) -> str:
    """``core/ReplaceBinaryOperator_Add_Sub`` → ``ReplaceBinaryOperator``: the kind of a mutant."""
    return name.split("/")[-1].split("_")[0]


def cosmic_ray_mutants(source: str, limit: int = 0) -> list[Mutant]:
    """Cosmic-Ray's mutants of ``source`` (a uniform, source-seeded sample of ``limit`` when > 0).

    Raises :class:`MutantsUnavailable` without the package, ``SyntaxError`` if ``source`` does not
    compile."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(source, "<function>", "exec")
    sites = positions(source)
    if 0 < limit < len(sites):
        seed = int.from_bytes(hashlib.sha256(source.encode("utf-8")).digest()[:8], "big")
        keep = sorted(random.Random(seed).sample(range(len(sites)), limit))
        sites = [sites[i] for i in keep]
    out: list[Mutant] = []
    seen = {source}
    for site in sites:
        mutant = cosmic_ray_mutant(source, site)
        if mutant is None or mutant.source in seen:
            continue
        seen.add(mutant.source)
        out.append(mutant)
    return out


def cosmic_ray_mutant(source: str, site: tuple[str, int, int]) -> Mutant | None:
    """The one mutant of a site of :func:`positions` (None when it equals ``source`` or does not
    compile); builds one mutant where :func:`cosmic_ray_mutants` builds them all."""
    plugins, _, mutate_code = _library()
    name, occurrence, line = site
    text = mutate_code(source, plugins.get_operator(name)(), occurrence)
    if text is None or text == source:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, "<mutant>", "exec")
    except (SyntaxError, ValueError):
        return None
    return Mutant(_family(name), f"line {line}: {name.split('/')[-1]} #{occurrence}", text)
