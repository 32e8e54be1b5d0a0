"""Chat prompts for the two roles (docs/algorithm.md, steps 2 and 4) and their rendering with a tokenizer.

The wording lives in plain-text templates under ``codea1/data/templates/``; placeholders are
``{question}``, ``{code}``, ``{entry_point}``, ``{n_tests}`` and ``{earlier_tests}``. Only those names are replaced,
in one pass, so braces elsewhere in a template and braces inside the substituted question or code are
left as they are.

* Coder: system "You are a helpful code completion assistant." and the reference's user message
  (instruction, blank line, ``Question:`` and the question).
* Tester, white-box (Code-A1): role, task, strategy, context (question + the candidate code, called
  "Buggy Code" even when it is correct), output format.
* Tester, black-box (the Self-Play baseline): the same structure without the code.
* Tester, UnLeakedTestBench's K-query task (:func:`iterative_tester_messages`): round 1 shows the
  function and asks for one test; round i shows the function and the tests of rounds 1..i-1 and
  asks for one new, different test.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any, Literal

from codea1.types import Problem

PLACEHOLDER = re.compile(r"\{(question|code|entry_point|n_tests|earlier_tests)\}")
DEFAULT_N_TESTS = 8


class PromptError(ValueError):
    """A prompt cannot be built or rendered (missing template, tokenizer without a chat template)."""


@cache
def template(name: str) -> str:
    """The text of ``templates/<name>.txt`` (one trailing newline removed)."""
    ref = resources.files("codea1.data").joinpath("templates", f"{name}.txt")
    try:
        text = ref.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PromptError(f"prompt template {name!r} not found in codea1/data/templates/") from None
    return text.removesuffix("\n")


def fill(text: str, **values: object) -> str:
    """Replace the known placeholders in ``text`` with ``values`` (one pass, nothing else touched)."""

    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        return str(values[key]) if key in values else m.group(0)

    return PLACEHOLDER.sub(sub, text)


def coder_messages(problem: Problem) -> list[dict[str, str]]:
    """System + user messages asking the Code LLM to complete ``problem`` in one ```python block."""
    return [
        {"role": "system", "content": template("coder_system")},
        {"role": "user", "content": fill(template("coder_user"), question=problem.question)},
    ]


def tester_messages(
    problem: Problem,
    code: str | None,
    n_tests: int = DEFAULT_N_TESTS,
    view: Literal["whitebox", "blackbox"] = "whitebox",
) -> list[dict[str, str]]:
    """System + user messages asking the Test LLM for ``n_tests`` asserts.

    ``whitebox`` shows ``code`` (the candidate under attack; ``None`` or empty shows an empty block);
    ``blackbox`` shows only the question and ignores ``code``.
    """
    if view not in ("whitebox", "blackbox"):
        raise PromptError(f"unknown tester view {view!r} (expected 'whitebox' or 'blackbox')")
    if n_tests < 1:
        raise PromptError(f"n_tests must be at least 1, got {n_tests}")
    user = fill(
        template(f"tester_{view}_user"),
        question=problem.question.rstrip("\n"),
        code=(code or "").strip("\n"),
        entry_point=problem.entry_point,
        n_tests=n_tests,
    )
    return [{"role": "system", "content": template("tester_system")}, {"role": "user", "content": user}]


def iterative_tester_messages(problem: Problem, code: str, earlier: list[str]) -> list[dict[str, str]]:
    """System + user messages of one round of the K-query task: the function under test ``code``
    and, after round 1, the ``earlier`` tests (one assert each); one new test is asked for."""
    name = "ult_tester_next_user" if earlier else "ult_tester_first_user"
    user = fill(
        template(name),
        code=code.strip("\n"),
        entry_point=problem.entry_point,
        earlier_tests="\n".join(t.strip() for t in earlier),
    )
    return [{"role": "system", "content": template("tester_system")}, {"role": "user", "content": user}]


def render(messages: list[dict[str, str]], tokenizer: Any) -> str:
    """The prompt text ``tokenizer``'s chat template makes of ``messages``, ending with the assistant turn."""
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
        raise PromptError(f"tokenizer {name!r} has no chat template; use an instruct/chat model")
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except ValueError as e:
        raise PromptError(f"cannot apply the chat template: {e}") from None


def as_plain_text(messages: list[dict[str, str]]) -> str:
    """``[system] ...`` / ``[user] ...`` blocks, for showing prompts without a tokenizer."""
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
