"""Whether a problem's text fields are text: a string decoded from JSON may hold a lone surrogate
(``"\\ud800"``), which no later step can encode (a prompt, a token, a UTF-8 file), so such a row is
refused when the data is read instead of ending a run that has started.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from codea1.data.rows import Issues
from codea1.types import Problem

_TEXT_FIELDS = ("id", "question", "entry_point", "reference", "imports", "source", "harness", "split")


def lone_surrogate(text: str) -> int | None:
    """The 0-based index of the first lone surrogate in ``text``, or None when it is valid text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """``(field path, string)`` for every string inside ``value`` (dict keys included)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k, f"{where} key")
            yield from _strings(v, f"{where}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, f"{where}[{i}]")


def text_issues(p: Problem) -> Issues:
    """``(field, reason)`` for every field of ``p`` holding a string that is not text."""
    fields: list[tuple[str, Any]] = [(name, getattr(p, name)) for name in _TEXT_FIELDS]
    fields += [("golden_tests", list(p.golden_tests)), ("metadata", p.metadata)]
    issues: Issues = []
    for name, value in fields:
        for where, text in _strings(value, name):
            at = lone_surrogate(text)
            if at is not None:
                issues.append((where, f"holds a lone surrogate ({ascii(text[at])} at character {at + 1}), "
                                      "which is not text (a \\udXXX escape in the file?)"))  # fmt: skip
                break
    return issues
