"""Values that cross module boundaries: problems, parsed model output, and execution verdicts.

Only the standard library is imported here. Every type is a frozen dataclass so that values can be
hashed, cached and compared; ``to_dict``/``from_dict`` helpers give the JSON forms used on disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# --------------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One function-writing task.

    ``reference`` is a complete, self-contained solution (its imports included) that defines
    ``entry_point``. ``question`` is the text shown to the models (signature + docstring, or a
    natural-language description). ``golden_tests`` are Python snippets (usually ``assert`` lines)
    that pass on the reference; they are optional and used by the Golden-Tests baseline and by
    evaluation. ``harness`` is an evalplus-style program defining ``check(candidate)`` when the
    source provides one.
    """

    id: str
    question: str
    entry_point: str
    reference: str
    golden_tests: tuple[str, ...] = ()
    imports: str = ""
    source: str = ""
    harness: str | None = None
    split: str = ""
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSONL form of this problem (the format our own loader reads back)."""
        d = asdict(self)
        d["golden_tests"] = list(self.golden_tests)
        return d


# --------------------------------------------------------------------------------------------------
# Parsed model output
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CodeExtraction:
    """The code found in a Code-LLM response, or the reason none could be used."""

    code: str | None
    reason: str = ""
    """Empty when ``code`` is set; otherwise why the response was rejected."""

    @property
    def ok(self) -> bool:
        """True when usable code was found."""
        return self.code is not None


@dataclass(frozen=True)
class TestCase:
    """One generated test: ``assert <call> == <predicted>``.

    ``call`` is an expression that calls the problem's entry point; ``predicted`` is the model's
    expected-value expression (untrusted code too). The oracle value comes from running ``call``
    against the reference solution; ``predicted`` only decides whether the test earns validity.
    """

    __test__ = False  # not a pytest test class

    call: str
    predicted: str

    def to_dict(self) -> dict[str, str]:
        """JSON form ``{"call", "predicted"}``."""
        return {"call": self.call, "predicted": self.predicted}


RejectReason = Literal["operator", "not_call", "syntax", "duplicate", "no_entry_point", "not_assert"]


@dataclass(frozen=True)
class RejectedAssert:
    """An assert found in a Test-LLM response that could not become a :class:`TestCase`."""

    text: str
    reason: RejectReason


@dataclass(frozen=True)
class TestExtraction:
    """All tests parsed from one Test-LLM response, in generation order, plus what was rejected."""

    __test__ = False

    tests: tuple[TestCase, ...]
    rejected: tuple[RejectedAssert, ...] = ()
    nonprintable_ratio: float = 0.0

    def rejected_by_reason(self) -> dict[str, int]:
        """Counts of rejected asserts per reason."""
        out: dict[str, int] = {}
        for r in self.rejected:
            out[r.reason] = out.get(r.reason, 0) + 1
        return out


# --------------------------------------------------------------------------------------------------
# Execution verdicts
# --------------------------------------------------------------------------------------------------

VerdictStatus = Literal["pass", "fail", "error", "timeout", "memory", "invalid"]
OracleStatus = Literal["valid", "wrong_prediction", "invalid", "uncomparable"]


@dataclass(frozen=True)
class Verdict:
    """Outcome of one (code, test) pair, decided on the trusted side.

    ``pass``: the candidate's return value equals the oracle value. ``fail``: it differs.
    ``error``: the call raised (``reason`` holds the exception type). ``timeout``/``memory``: a
    budget was exceeded. ``invalid``: the test could not be judged (the oracle is invalid, or the
    code itself did not load).
    """

    status: VerdictStatus
    reason: str = ""

    @property
    def passed(self) -> bool:
        """True only for ``pass``."""
        return self.status == "pass"

    def to_dict(self) -> dict[str, str]:
        """JSON form ``{"status", "reason"}``."""
        return {"status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class OracleVerdict:
    """What the reference solution says about one test.

    ``valid``: the call ran on the reference and the model's prediction equals the oracle value.
    ``wrong_prediction``: the call ran, but the predicted value differs (the test is still usable
    with the oracle value, as in the paper, but counts against validity). ``invalid``: the call
    raised, timed out or returned a value that cannot be encoded (``reason`` says which).
    ``uncomparable``: the call returned a value with no inspectable state (a function, a
    C-implemented object such as a ``deque``), so no candidate can be judged on it; the test counts
    neither for nor against anyone (docs/algorithm.md, reference bug 13.2).
    """

    status: OracleStatus
    reason: str = ""

    @property
    def usable(self) -> bool:
        """True when the reference produced a comparable oracle value (valid or wrong prediction)."""
        return self.status in ("valid", "wrong_prediction")

    def to_dict(self) -> dict[str, str]:
        """JSON form ``{"status", "reason"}``."""
        return {"status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class GridJob:
    """One problem's execution request: every code against every test.

    ``codes`` are complete candidate programs (problem imports already prepended by the caller).
    ``question_names``: the names the question itself provides (``codea1.sandbox.test_names``); a
    test that uses a name only the reference defines is then ``invalid``. None: not checked.
    ``question_helpers``: the question's own imports and helper functions as trusted source
    (``codea1.sandbox.test_names.helper_source``); each program's tests call these, never the
    program's definitions of the same names. "": none.
    """

    id: str
    reference: str
    entry_point: str
    codes: tuple[str, ...]
    tests: tuple[TestCase, ...]
    question_names: frozenset[str] | None = None
    question_helpers: str = ""


@dataclass(frozen=True)
class ExecGrid:
    """The result of a :class:`GridJob`: oracle per test, load status per code, verdict per pair.

    Shapes: ``oracle[t]``, ``code_status[c]``, ``verdicts[c][t]``. ``code_status[c]`` is ``pass``
    when the code's definitions executed without raising and defined the entry point.
    """

    id: str
    oracle: tuple[OracleVerdict, ...]
    code_status: tuple[Verdict, ...]
    verdicts: tuple[tuple[Verdict, ...], ...]

    @property
    def code_valid(self) -> tuple[bool, ...]:
        """Per code: whether its definitions loaded (``valid(c)`` of the paper)."""
        return tuple(v.passed for v in self.code_status)

    def to_dict(self) -> dict[str, Any]:
        """JSON form used by ``codea1 sandbox run``."""
        return {
            "id": self.id,
            "oracle": [o.to_dict() for o in self.oracle],
            "code_status": [v.to_dict() for v in self.code_status],
            "grid": [[v.to_dict() for v in row] for row in self.verdicts],
        }


@dataclass(frozen=True)
class CheckJob:
    """Run an evalplus-style harness against one candidate (evaluation, not training).

    The harness runs in a process of its own with a proxy for the candidate's ``entry_point``
    (bound to ``check``'s argument and to the entry point's name, unless the harness defines that
    name itself); each call runs in the candidate's process and only its return value comes back.
    ``cpu_s`` is the CPU-time budget of the whole check (derived from the reference's time).
    """

    id: str
    code: str
    entry_point: str
    harness: str
    cpu_s: float = 10.0
