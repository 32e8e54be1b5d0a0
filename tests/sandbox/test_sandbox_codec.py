"""The safe value codec and trusted-side equality."""

from __future__ import annotations

import collections
import fractions
import math
import typing

import pytest

from codea1.sandbox.equality import contains_opaque, values_equal
from codea1.sandbox.worker.value_codec import (
    CodecError,
    CycleRef,
    ObjectState,
    Opaque,
    decode,
    encode,
    frame,
    split_frames,
)


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -1, 2**200, -(2**70), 1.5, float("inf"), 1 + 2j, "héllo\udcff", b"\x00\xff",
     [1, [2, (3, "x")]], (), {"a": [1, 2], 3: None, (1, 2): frozenset({1})}, {1, 2, 3}, frozenset({"a"})],
)  # fmt: skip
def test_roundtrip_preserves_value_and_type(value: object) -> None:
    out = decode(encode(value))
    assert out == value and type(out) is type(value)


def test_nan_roundtrip() -> None:
    assert math.isnan(decode(encode(float("nan"))))


def test_object_without_inspectable_state_becomes_opaque_with_capped_repr() -> None:
    class Rigged(Exception):  # a C-implemented base: its state is not in __dict__/__slots__
        def __eq__(self, other: object) -> bool:
            return True

        def __repr__(self) -> str:
            return "R" * 10_000

    out = decode(encode(Rigged()))
    assert isinstance(out, Opaque) and out.type_name.endswith("Rigged") and len(out.repr) == 200
    assert contains_opaque([1, {"k": out}])
    assert isinstance(decode(encode(lambda: 1)), Opaque)
    assert isinstance(decode(encode(collections.deque([1]))), Opaque)
    assert isinstance(decode(encode(int)), Opaque)
    assert isinstance(decode(encode(object())), Opaque)


def test_subclass_of_a_plain_type_is_read_as_its_builtin_value() -> None:
    class Sneaky(int):
        def __eq__(self, other: object) -> bool:
            return True

        def __int__(self) -> int:
            return 99

    class Listy(list):
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter([0])

    class Weird(complex):
        real = 7.0  # type: ignore[assignment]

    out = decode(encode([Sneaky(3), Listy([1, 2]), Weird(1, 2)]))
    assert out == [3, [1, 2], 1 + 2j] and [type(v) for v in out] == [int, list, complex]
    point = collections.namedtuple("point", "x y")
    assert decode(encode(point(1, 2))) == (1, 2)
    assert decode(encode(collections.Counter("aab"))) == {"a": 2, "b": 1}
    assert type(decode(encode(collections.OrderedDict(a=1)))) is dict


class Node:
    def __init__(self, v: object, nxt: object = None) -> None:
        self.v = v
        self.next = nxt


class Slotted:
    __slots__ = ("__hidden", "a", "unset")

    def __init__(self) -> None:
        self.a = 1
        self.__hidden = 2


T = typing.TypeVar("T")


class Box(typing.Generic[T]):
    def __init__(self) -> None:
        self.items = [1]


def test_objects_are_encoded_by_class_and_sorted_attributes() -> None:
    out = decode(encode(Node(1, Node([2.5], None))))
    assert isinstance(out, ObjectState) and out.qualname == f"{__name__}.Node"
    assert out.attrs == (("next", ObjectState(out.qualname, (("next", None), ("v", [2.5])))), ("v", 1))
    slotted = decode(encode(Slotted()))
    assert slotted.attrs == (("_Slotted__hidden", 2), ("a", 1))
    assert decode(encode(fractions.Fraction(1, 3))).attrs == (("_denominator", 3), ("_numerator", 1))
    assert decode(encode(Box())).attrs == (("items", [1]),)  # a stateless C base (Generic) is fine


def test_cycles_become_references_to_the_enclosing_object() -> None:
    a = Node(1)
    a.next = Node(2, a)
    out = decode(encode(a))
    assert out.attrs[0][1].attrs[0] == ("next", CycleRef(1))
    b = Node(1)
    b.next = Node(2, b)
    assert values_equal(out, decode(encode(b)))
    c = Node(1)
    c.next = Node(2, c.next)  # same values, no cycle
    assert not values_equal(out, decode(encode(c)))
    loop = Node(0)
    loop.next = [loop, {"self": loop}]
    assert decode(encode(loop)).attrs[0][1] == [CycleRef(0), {"self": CycleRef(0)}]


def test_hostile_objects_are_opaque_or_capped_never_a_crash() -> None:
    class Raising:
        def __init__(self) -> None:
            self.x = 1

        def __getattribute__(self, name: str) -> object:
            raise RuntimeError(name)

        @property
        def y(self) -> int:
            raise RuntimeError

    class HiddenDict:
        @property
        def __dict__(self) -> dict:  # type: ignore[override]
            raise RuntimeError

    assert decode(encode(Raising())).attrs == (("x", 1),)  # read from __dict__, nothing ran
    assert isinstance(decode(encode(HiddenDict())), Opaque)
    chain = Node(0)
    for i in range(1, 300):
        chain = Node(i, chain)
    with pytest.raises(CodecError, match="too deep"):
        encode(chain)
    wide = Node(0)
    wide.__dict__.update({f"a{i}": "x" * 100 for i in range(1000)})
    with pytest.raises(CodecError, match="too large"):
        encode(wide)
    dag = Node(0)
    for i in range(40):  # 2**40 paths, shared (not cyclic): stopped by the size cap
        dag = Node(i, [dag, dag])
    with pytest.raises(CodecError, match="too large"):
        encode(dag)


def test_size_and_depth_caps() -> None:
    with pytest.raises(CodecError, match="too large"):
        encode(10**100_000, max_bytes=1000)
    with pytest.raises(CodecError, match="too large"):
        encode(["x" * 600, "y" * 600], max_bytes=1000)
    nested: list[object] = []
    for _ in range(200):
        nested = [nested]
    with pytest.raises(CodecError, match="too deep"):
        encode(nested)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"Q",
        b"i\xff\xff\xff\xff",
        b"l\x05\x00\x00\x00N",
        b"NN",
        b"s\x02\x00\x00\x00\xff\xfe",
        b"d\x01\x00\x00\x00l\x00\x00\x00\x00N",
        b"R\x00\x00\x00\x00",  # cycle reference with no enclosing object
        b"A\x01\x00\x00\x00Ns\x01\x00\x00\x00\x00N",  # class name is not a string
        b"As\x01\x00\x00\x00X\x02\x00\x00\x00s\x01\x00\x00\x00bNs\x01\x00\x00\x00aN",  # unsorted
        b"As\x01\x00\x00\x00X\x01\x00\x00\x00s\x01\x00\x00\x00aR\x01\x00\x00\x00",  # ref too far
    ],
)
def test_malformed_bytes_raise_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode(data)


def test_frames_split_and_stop_at_end_marker() -> None:
    stream = frame(b"ab") + frame(b"c") + b"\x00\x00\x00\x00" + frame(b"ignored")
    assert split_frames(stream) == ([b"ab", b"c"], True)
    assert split_frames(frame(b"abc")[:-1]) == ([], False)


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (True, 1, False), (1, True, False), (True, True, True), (1, 1.0, True), (0.1 + 0.2, 0.3, True),
        (1.0, 1.001, False), (float("nan"), float("nan"), True), (float("inf"), float("inf"), True),
        ([1, 2], (1, 2), True), ([1, 2], [2, 1], False), ({1, 2}, frozenset({2, 1}), True),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1.0}, True), ({1: "x"}, {True: "x"}, False), ("a", b"a", False),
        (None, 0, False), (None, None, True), ({0.1 + 0.2}, {0.3}, True), ([[1.0]], [[1]], True),
        (Opaque("m.A", "A()"), Opaque("m.A", "A()"), True), (Opaque("m.A", "A()"), 1, False),
        (ObjectState("m.N", (("v", 1.0),)), ObjectState("m.N", (("v", 1.0000001),)), True),
        (ObjectState("m.N", (("v", 1),)), ObjectState("m.N", (("v", True),)), False),
        (ObjectState("m.N", (("v", 1),)), ObjectState("m.M", (("v", 1),)), False),
        (ObjectState("m.N", (("v", 1),)), ObjectState("m.N", (("w", 1),)), False),
        (ObjectState("m.N", (("v", 1),)), ObjectState("m.N", (("v", 1), ("w", 2))), False),
        (ObjectState("m.N", (("v", 1),)), {"v": 1}, False), (ObjectState("m.N", ()), Opaque("m.N", "N()"), False),
        ({ObjectState("m.N", (("v", [1]),))}, {ObjectState("m.N", (("v", [1.0]),))}, True),
        ({ObjectState("m.N", (("v", 1),)): 2}, {ObjectState("m.N", (("v", True),)): 2}, False),
        (CycleRef(0), CycleRef(0), True), (CycleRef(0), CycleRef(1), False), (CycleRef(0), 0, False),
        (10**400, 1e308, False), (1 + 1j, 1 + 1j, True), ("x", "y", False), ({"a": 1}, {"a": 1, "b": 2}, False),
    ],
)  # fmt: skip
def test_values_equal_rules(a: object, b: object, equal: bool) -> None:
    assert values_equal(a, b) is equal
    assert values_equal(b, a) is equal


@pytest.mark.parametrize(
    ("got", "expected", "equal"),
    [
        (float(10**7 * 3 + 5), 30000000, False), (30000000, float(10**7 * 3 + 5), True),
        (30000000.0, 30000000, True), (1.0000001, 1, False), (1, 1.0000001, True), (1.0000001, 1.0, True),
        ([2.0000001], [2], False), ({"k": 2.0000001}, {"k": 2}, False), ({2.0000001}, {2}, False),
        (ObjectState("m.N", (("v", 1.0000001),)), ObjectState("m.N", (("v", 1),)), False),
        (complex(5, 1e-9), 5, False), (5, complex(5, 1e-9), True), (10**400, 1e308, False),
    ],
)  # fmt: skip
def test_float_tolerance_only_where_the_expected_value_is_a_float(
    got: object, expected: object, equal: bool
) -> None:
    """evalplus: a tolerance for expected floats only; an expected int is compared as Python does."""
    assert values_equal(got, expected) is equal
