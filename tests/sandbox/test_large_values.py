"""Values too large to ship to the harness are compared by digest (MBPP/255's 1.2 GB answer).

The call server sends the digest of a value whose encoding is over the check's cap; the harness
process H compares it with the digest of the value it expects, computed there. A wrong value, a
forged or malformed digest, and any use other than ``==`` / ``!=`` fail the check. The cap is
lowered to 4 KiB here so that small values take the digest path.
"""

from __future__ import annotations

import marshal
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from codea1.config import SandboxConfig
from codea1.sandbox import Sandbox, checks
from codea1.sandbox.worker.value_codec import digest
from codea1.types import CheckJob

CAP = 4096
RIGHT = "def f(n):\n    return [(i, str(i)) for i in range(n)]\n"
WRONG = "def f(n):\n    return [(i, str(i)) for i in range(n)][:-1] + [(-1, '')]\n"
EQ_HARNESS = """
def check(candidate):
    exp = [(i, str(i)) for i in range(3000)]
    out = candidate(3000)
    if out != exp:
        raise AssertionError("differs")
    assert out == exp
    assert candidate(3) == [(0, '0'), (1, '1'), (2, '2')]  # small: shipped as a value
"""
LEN_HARNESS = """
def check(candidate):
    out = candidate(3000)
    try:
        len(out)
    except Exception:
        pass
"""
FORGE = """
import os, struct
from codea1.sandbox.worker import program
def f(n):
    return [(i, str(i)) for i in range(n)]
_real = program._result
def _forged(call, max_bytes, digest_above=None):
    real = _real(call, max_bytes, digest_above)
    if real[:1] == b"h":
        return b"h" + {body!r}
    return real
program._result = _forged
"""


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxConfig(workers=1)) as sb:
        yield sb


@pytest.fixture(autouse=True)
def small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "CHECK_VALUE_BYTES", CAP)


def _check(sandbox: Sandbox, code: str, harness: str = EQ_HARNESS) -> tuple[str, str]:
    (v,) = sandbox.run_checks([CheckJob("big", code, "f", harness, cpu_s=10.0)])
    return v.status, v.reason


def test_a_right_value_over_the_cap_passes_by_digest(sandbox: Sandbox) -> None:
    assert _check(sandbox, RIGHT) == ("pass", "")


def test_a_wrong_value_over_the_cap_fails(sandbox: Sandbox) -> None:
    assert _check(sandbox, WRONG)[0] == "fail"


def test_only_equality_can_use_a_digested_value(sandbox: Sandbox) -> None:
    status, reason = _check(sandbox, RIGHT, LEN_HARNESS)  # the harness even catches the refusal
    assert status == "fail" and "too large to ship" in reason


@pytest.mark.parametrize(
    "body",
    [
        b"m" + bytes(40),  # a made-up digest
        digest([(i, str(i)) for i in range(2999)]),  # the digest of another value
        b"m" + bytes(10),  # malformed
    ],
)
def test_a_forged_digest_fails(sandbox: Sandbox, body: bytes) -> None:
    status, _ = _check(sandbox, FORGE.format(body=body[1:] if body[:1] == b"h" else body))
    assert status in ("fail", "error")


CRAFTED_INT = """
import marshal, struct
def f(n):
    # the bytes the old digest hashed for [1, None, None, None] * n, read back by marshal as an int
    body = (marshal.dumps(1, 0) + marshal.dumps(None, 0) * 3) * n
    return marshal.loads(b"l" + struct.pack("<I", 4 * n) + body)
"""
CRAFTED_HARNESS = """
def check(candidate):
    assert candidate(1000) == [1, None, None, None] * 1000
"""


def test_a_crafted_int_does_not_match_a_list_by_digest(sandbox: Sandbox) -> None:
    """A list's digest once began as ``marshal`` of a large int does (``l`` + count): an int whose
    digits spell the list's elements passed ``assert out == [...]`` (issue 35, item 2)."""
    honest = "def f(n):\n    return [1, None, None, None] * n\n"
    assert _check(sandbox, honest, CRAFTED_HARNESS) == ("pass", "")
    assert _check(sandbox, CRAFTED_INT, CRAFTED_HARNESS)[0] == "fail"


def _crafted(value: list[object]) -> int:
    """The int whose ``marshal`` is a list's old digest stream (``l``, u32 count, each element)."""
    body = b"".join(marshal.dumps(x, 0) for x in value)
    return marshal.loads(b"l" + struct.pack("<I", len(value)) + body)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "pair",
    [
        ([1, None, None, None] * 8, _crafted([1, None, None, None] * 8)),
        ((1, 2), [1, 2]),
        ([], ()),
        ([], 0),
        ((), None),
        ("", b""),
        (frozenset({1}), {1}),
        ({1: 2}, [(1, 2)]),
        (0, False),
        (1, 1.0),
        (1.0, 1 + 0j),
    ],
)
def test_no_two_types_share_a_digest(pair: tuple[object, object]) -> None:
    a, b = pair
    assert digest(a) != digest(b)
    assert digest(a) == digest(a) and digest(b) == digest(b)


def test_every_digest_is_tagged_by_its_stream() -> None:
    class Sub(list):  # not marshalable: the codec's scheme
        pass

    tags = {digest(v)[:1] for v in ([1], (1,), 1, "x", {1: 2}, Sub([1]))}
    assert tags == {b"L", b"T", b"V", b"C"}


def test_digests_depend_on_the_value_only() -> None:
    shared = ["Dog", "Cat"]
    built = ["".join(["D", "og"]), "".join(["C", "at"])]
    assert digest([tuple(shared)] * 3) == digest([tuple(built)] * 3)
    assert digest([1]) != digest([True]) and digest([1]) != digest([1.0])
    assert digest([(1, 2)]) != digest([[1, 2]]) and digest((1,)) != digest([1])


SHARED_PARQUET = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.mark.slow
def test_mbpp_255_canonical_solution_passes_its_harness() -> None:
    """The reference of MBPP/255 returns 1.7 million 77-tuples for one input (1.2 GB encoded)."""
    if not (os.environ.get("CODEA1_EVALPLUS_PARQUET") or SHARED_PARQUET.is_dir()):
        pytest.skip("the evalplus parquet (../shared/data) is not here")
    from codea1.data.problems import load_problems
    from codea1.eval.code_eval import harness_program

    (problem,) = [p for p in load_problems("mbppplus") if p.id == "MBPP/255"]
    job = CheckJob(
        problem.id, problem.reference, problem.entry_point, harness_program(problem, problem.harness), 120.0
    )
    with Sandbox(SandboxConfig(workers=1, memory_mb=6144)) as sb:
        (v,) = sb.run_checks([job])
    assert (v.status, v.reason) == ("pass", "")
