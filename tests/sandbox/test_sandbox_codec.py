"""The safe value codec and trusted-side equality."""

from __future__ import annotations

import math

import pytest

from codea1.sandbox.equality import contains_opaque, values_equal
from codea1.sandbox.value_codec import CodecError, Opaque, decode, encode, frame, split_frames


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


def test_custom_object_becomes_opaque_with_capped_repr() -> None:
    class Rigged:
        def __eq__(self, other: object) -> bool:
            return True

        def __repr__(self) -> str:
            return "R" * 10_000

    out = decode(encode(Rigged()))
    assert isinstance(out, Opaque) and out.type_name.endswith("Rigged") and len(out.repr) == 200
    assert contains_opaque([1, {"k": out}])


def test_int_subclass_is_not_plain_data() -> None:
    class Sneaky(int):
        pass

    assert isinstance(decode(encode(Sneaky(3))), Opaque)


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
        (10**400, 1e308, False), (1 + 1j, 1 + 1j, True), ("x", "y", False), ({"a": 1}, {"a": 1, "b": 2}, False),
    ],
)  # fmt: skip
def test_values_equal_rules(a: object, b: object, equal: bool) -> None:
    assert values_equal(a, b) is equal
    assert values_equal(b, a) is equal
