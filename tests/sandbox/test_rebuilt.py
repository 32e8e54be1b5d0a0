"""What a test holds of the entry point's value (no sandbox needed): plain data rebuilt as built-in
values, anything else as a view whose comparisons never run the program's methods, and an encoding
that is the same as the original value's."""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from typing import Any, NamedTuple

import pytest

from codea1.sandbox.worker.rebuilt import ResultView, rebuild
from codea1.sandbox.worker.value_codec import CodecError, encode


class AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __lt__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class LyingInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


class Node:
    def __init__(self, val: Any, nxt: Any = None) -> None:
        self.val = val
        self.next = nxt

    def __str__(self) -> str:
        return f"Node({self.val})"

    def total(self) -> Any:
        return self.val + (self.next.total() if self.next else 0)


class Pair(NamedTuple):
    a: int
    b: Any


def _cycle() -> Node:
    a, b = Node(1), Node(2)
    a.next, b.next = b, a
    return a


VALUES = [
    None, True, 3, 2.5, 1 + 2j, "s", b"b", bytearray(b"ba"), [1, [2, (3, {4})]], {"k": [1.0, None]},
    frozenset({1, 2}), Counter("aab"), OrderedDict(a=1), Pair(1, [2]), LyingInt(7), Node(1, Node(2)),
    [Node(3), {"n": Node(4)}], _cycle(), AlwaysEqual(), deque([1, 2]), len,
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_rebuilt_value_encodes_as_the_value(value: Any) -> None:
    assert encode(rebuild(value)) == encode(value)


@pytest.mark.parametrize(
    "expr",
    [
        "v == 6", "6 == v", "v != 6", "[v] == [6]", "(v, 1) == (6, 1)", "{'k': v} == {'k': 6}", "v in [6]",
        "{v} == {6}", "v == v2",
    ],
)  # fmt: skip
@pytest.mark.parametrize("liar", [AlwaysEqual, lambda: LyingInt(0), lambda: [AlwaysEqual()]])
def test_a_value_never_lies_to_a_comparison_the_test_makes(expr: str, liar: Any) -> None:
    held = {"v": rebuild(liar()), "v2": rebuild(Node(0))}
    if isinstance(held["v"], list):  # the comparisons with the element inside
        held["v"] = held["v"][0]
    assert eval(expr, held) is (expr == "v != 6")  # noqa: S307 - constant test expressions


def test_a_view_reads_state_and_runs_what_the_test_asks_for_with_values_rebuilt() -> None:
    view = rebuild(Node(1, Node(AlwaysEqual())))
    assert type(view) is ResultView
    assert view.val == 1 and type(view.next) is ResultView
    assert view.next.val != 5 and not view.next.val == 5
    assert str(view) == "Node(1)" and type(str(view)) is str
    assert rebuild(Node(1, Node(2))).total() == 3
    assert rebuild(_cycle()).next.next.val == 1
    assert rebuild(Node(1)) == rebuild(Node(1)) and rebuild(Node(1)) != rebuild(Node(2))
    assert list(rebuild(deque([1, AlwaysEqual()])))[1] != 1
    assert list(rebuild(iter([1, 2]))) == [1, 2] and len(rebuild(deque([1]))) == 1
    with pytest.raises(AttributeError):
        _ = view._Node__secret
    with pytest.raises(TypeError):
        _ = view < 3


def test_plain_values_are_fresh_built_in_copies() -> None:
    value = [[1], {"a": 2}]
    copy = rebuild(value)
    assert copy == value and copy is not value and copy[0] is not value[0]
    assert type(rebuild(Counter("ab"))) is dict and type(rebuild(Pair(1, 2))) is tuple
    assert type(rebuild(LyingInt(3))) is int
    deep: list[Any] = []
    for _ in range(200):
        deep = [deep]
    copy = rebuild(deep)  # deeper than the codec encodes: a view from there down, unencodable as before
    assert len(copy) == 1 and type(copy[0]) is list
    with pytest.raises(CodecError):
        encode(copy)
