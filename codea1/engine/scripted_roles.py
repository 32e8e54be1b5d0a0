"""The scripted engine's built-in script (``engine.kind=scripted``, ``codea1 train --engine scripted``).

The coder answers with the problem's reference, a broken variant or prose; the tester with some of
the problem's golden asserts, sometimes one with a wrong expected value. Deterministic given
(prompt, sample, seed), so a CPU dry run of the whole loop takes seconds. A FAKE for tests and dry
runs: it says nothing about model quality.

Imports: types, core.seeds, engine.scripted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codea1.core.seeds import learner_seed, script_rng
from codea1.engine.scripted import ScriptedLearner, ScriptedPolicy
from codea1.types import Problem

Responder = Callable[[str, int, int | None], str]
"""``respond(prompt_text, sample_index, seed) -> completion text`` (the scripted engine's script)."""


def _problem_of(prompt: str, problems: Sequence[Problem]) -> Problem | None:
    """The problem whose question appears in a rendered prompt (the longest match wins)."""
    found = [p for p in problems if p.question.strip() and p.question.strip() in prompt]
    return max(found, key=lambda p: len(p.question)) if found else None


def scripted_script(problems: Sequence[Problem]) -> tuple[Responder, Responder]:
    """The built-in script of ``--engine scripted``: deterministic given (prompt, sample, seed).

    Coder: the reference solution (half the time), a variant whose entry point returns None, or prose
    without code. Tester: three to six of the problem's golden asserts, sometimes one with a wrong
    expected value (so validity and failures vary within a group).
    """

    def coder(prompt: str, sample: int, seed: int | None) -> str:
        p, r = _problem_of(prompt, problems), script_rng("coder", seed, sample, prompt).random()
        if p is None or r >= 0.85:
            return "I am not sure how to solve this one."
        code = p.reference.rstrip()
        if r >= 0.5:
            code += f"\n\n\ndef {p.entry_point}(*args, **kwargs):\n    return None"
        return f"Here is my solution.\n```python\n{code}\n```"

    def tester(prompt: str, sample: int, seed: int | None) -> str:
        p, rng = _problem_of(prompt, problems), script_rng("tester", seed, sample, prompt)
        asserts = [line.strip() for t in (p.golden_tests if p else ()) for line in t.splitlines()]
        asserts = [a for a in asserts if a.startswith("assert ") and "==" in a]
        if not asserts:
            return "assert True"
        chosen = rng.sample(asserts, min(len(asserts), rng.randint(3, 6)))
        if rng.random() < 0.4:
            chosen[-1] = re.sub(r"==.*$", "== None", chosen[-1])
        return "```python\n" + "\n".join(chosen) + "\n```"

    return coder, tester


@dataclass
class ScriptedRoles:
    """The two roles on the scripted engine (one learner for both when shared): a
    :class:`~codea1.engine.base.Roles`."""

    coder_policy: ScriptedPolicy
    coder_learner: ScriptedLearner
    tester_policy: ScriptedPolicy
    tester_learner: ScriptedLearner
    updates_overlap: bool = False
    """As the Ray backend's ``split`` placement when True (tests of the trainer's side-by-side updates)."""

    def close(self) -> None:
        """Nothing to release: the fakes live in this process."""


def scripted_roles(problems: Sequence[Problem], *, seed: int = 0, shared: bool = False) -> ScriptedRoles:
    """``--engine scripted``: :class:`~codea1.engine.scripted.ScriptedPolicy` per role driven by
    :func:`scripted_script`, and :class:`~codea1.engine.scripted.ScriptedLearner` (one when shared)."""
    coder, tester = scripted_script(problems)
    coder_learner = ScriptedLearner(seed=learner_seed(seed, "coder"))
    return ScriptedRoles(
        ScriptedPolicy(lambda prompt, j: coder(prompt, j, seed)),
        coder_learner,
        ScriptedPolicy(lambda prompt, j: tester(prompt, j, seed)),
        coder_learner if shared else ScriptedLearner(seed=learner_seed(seed, "tester")),
    )
