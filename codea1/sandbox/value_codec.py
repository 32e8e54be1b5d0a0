"""Safe, typed binary encoding of plain data, and the length-prefixed frames that carry it.

Values returned by untrusted code cross to the trusted side only in this encoding: ``None``,
``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set``
and ``frozenset``, nested. Anything else becomes an :class:`Opaque` (qualified type name + capped
repr). The decoder never executes anything: it walks bytes with explicit size and depth caps and
raises :class:`CodecError` on any malformed input. The sandbox worker loads this module, which
must stay lean.
"""

from __future__ import annotations

import struct
from typing import Any

MAX_DEPTH = 100
"""Deepest nesting accepted by both encoder and decoder."""
REPR_CAP = 200
"""Characters kept of the repr of a value that is not plain data."""

_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")


class CodecError(ValueError):
    """A value that cannot be encoded within the caps, or bytes that are not a valid encoding."""


class Opaque:
    """A value that is not plain data: compared by type name and repr only (immutable).

    A plain class rather than a dataclass: ``dataclasses`` would pull ``inspect`` into the lean
    sandbox worker, and every module there makes each fork dearer.
    """

    __slots__ = ("type_name", "repr")
    type_name: str
    repr: str

    def __init__(self, type_name: str, repr: str) -> None:  # noqa: A002 - the field's name
        object.__setattr__(self, "type_name", type_name)
        object.__setattr__(self, "repr", repr)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Opaque is immutable (cannot set {name!r})")

    def __eq__(self, other: object) -> bool:
        if type(other) is not Opaque:
            return NotImplemented
        return (self.type_name, self.repr) == (other.type_name, other.repr)

    def __hash__(self) -> int:
        return hash((Opaque, self.type_name, self.repr))

    def __repr__(self) -> str:
        return f"Opaque(type_name={self.type_name!r}, repr={self.repr!r})"


def _qualname(value: Any) -> str:
    t = type(value)
    return f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', '?')}"


def _safe_repr(value: Any) -> str:
    try:
        text = repr(value)
    except BaseException:  # noqa: BLE001 - a hostile __repr__ must not break encoding
        return "<unrepresentable>"
    if type(text) is not str:
        return "<unrepresentable>"
    return text[:REPR_CAP]


_BASE_CONTENT: tuple[tuple[type, Any], ...] = (
    (str, str.__str__),
    (int, int.__int__),
    (float, float.__float__),
    (complex, lambda v: complex(complex.real.__get__(v), complex.imag.__get__(v))),
    (bytes, lambda v: bytes(memoryview(v))),
    (dict, lambda v: dict(dict.items(v))),
    (list, lambda v: list(list.__iter__(v))),
    (tuple, lambda v: tuple(tuple.__iter__(v))),
    (set, lambda v: set(set.__iter__(v))),
    (frozenset, lambda v: frozenset(frozenset.__iter__(v))),
)
"""How the content of a subclass of a plain type is read with the base type's own methods, so
that no method the subclass overrides (``__eq__``, ``__iter__``, ``__str__``...) is consulted."""


def _as_plain(value: Any) -> Any:
    """Plain data for values that carry it: numpy scalars/arrays (only if numpy is already imported)
    become Python values, and subclasses of plain types (``Counter``, ``OrderedDict``, a
    ``namedtuple``, an ``IntEnum`` member, a ``str`` subclass) become their base type's content,
    as Python's own ``==`` compares them. Anything else is returned unchanged."""
    module = getattr(type(value), "__module__", "")
    try:
        if module == "numpy" and hasattr(value, "tolist"):
            return value.tolist()
        for base, content in _BASE_CONTENT:
            if isinstance(value, base):
                return content(value)
    except BaseException:  # noqa: BLE001 - a hostile subclass stays opaque
        return value
    return value


class _Encoder:
    def __init__(self, max_bytes: int, max_depth: int) -> None:
        self.out = bytearray()
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    def put(self, data: bytes) -> None:
        if len(self.out) + len(data) > self.max_bytes:
            raise CodecError(f"too large (> {self.max_bytes} bytes)")
        self.out += data

    def put_blob(self, tag: bytes, blob: bytes) -> None:
        self.put(tag + _U32.pack(len(blob)))
        self.put(blob)

    def value(self, v: Any, depth: int) -> None:  # noqa: C901 - one branch per type
        if depth > self.max_depth:
            raise CodecError(f"too deep (> {self.max_depth} levels)")
        t = type(v)
        if v is None:
            self.put(b"N")
        elif t is bool:
            self.put(b"T" if v else b"F")
        elif t is int:
            nbytes = (v.bit_length() + 8) // 8
            if nbytes > self.max_bytes:
                raise CodecError(f"too large (> {self.max_bytes} bytes)")
            self.put_blob(b"i", v.to_bytes(nbytes, "little", signed=True))
        elif t is float:
            self.put(b"f" + _F64.pack(v))
        elif t is complex:
            self.put(b"c" + _F64.pack(v.real) + _F64.pack(v.imag))
        elif t is str:
            if len(v) > self.max_bytes:
                raise CodecError(f"too large (> {self.max_bytes} bytes)")
            self.put_blob(b"s", v.encode("utf-8", "surrogatepass"))
        elif t is bytes or t is bytearray:
            if len(v) > self.max_bytes:
                raise CodecError(f"too large (> {self.max_bytes} bytes)")
            self.put_blob(b"b", bytes(v))
        elif t is list or t is tuple or t is set or t is frozenset:
            tag = {list: b"l", tuple: b"t", set: b"S", frozenset: b"Z"}[t]
            items = list(v)
            self.put(tag + _U32.pack(len(items)))
            for item in items:
                self.value(item, depth + 1)
        elif t is dict:
            pairs = list(v.items())
            self.put(b"d" + _U32.pack(len(pairs)))
            for key, item in pairs:
                self.value(key, depth + 1)
                self.value(item, depth + 1)
        else:
            plain = _as_plain(v)
            if plain is not v:
                self.value(plain, depth)
                return
            name = _qualname(v)
            self.put(b"O")
            self.value(name[:REPR_CAP], depth + 1)
            self.value(_safe_repr(v), depth + 1)


def encode(value: Any, max_bytes: int = 65536, max_depth: int = MAX_DEPTH) -> bytes:
    """Encode ``value``; raises :class:`CodecError` when it exceeds ``max_bytes`` or ``max_depth``."""
    enc = _Encoder(max_bytes, max_depth)
    try:
        enc.value(value, 0)
    except RecursionError as e:
        raise CodecError("too deep (recursion)") from e
    return bytes(enc.out)


class _Decoder:
    def __init__(self, data: bytes, max_depth: int) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.max_depth = max_depth

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CodecError("truncated encoding")
        chunk = self.data[self.pos : self.pos + n].tobytes()
        self.pos += n
        return chunk

    def count(self) -> int:
        n: int = _U32.unpack(self.take(4))[0]
        if n > len(self.data) - self.pos:  # every element needs at least one byte
            raise CodecError("element count exceeds the encoding")
        return n

    def value(self, depth: int) -> Any:  # noqa: C901 - one branch per tag
        if depth > self.max_depth:
            raise CodecError("too deep")
        tag = self.take(1)
        if tag == b"N":
            return None
        if tag == b"T":
            return True
        if tag == b"F":
            return False
        if tag == b"i":
            return int.from_bytes(self.take(self.count()), "little", signed=True)
        if tag == b"f":
            return _F64.unpack(self.take(8))[0]
        if tag == b"c":
            return complex(_F64.unpack(self.take(8))[0], _F64.unpack(self.take(8))[0])
        if tag == b"s":
            try:
                return self.take(self.count()).decode("utf-8", "surrogatepass")
            except UnicodeDecodeError as e:
                raise CodecError("invalid text") from e
        if tag == b"b":
            return self.take(self.count())
        if tag in (b"l", b"t"):
            items = [self.value(depth + 1) for _ in range(self.count())]
            return items if tag == b"l" else tuple(items)
        if tag in (b"S", b"Z"):
            items = [self.value(depth + 1) for _ in range(self.count())]
            try:
                return set(items) if tag == b"S" else frozenset(items)
            except TypeError as e:
                raise CodecError("unhashable set element") from e
        if tag == b"d":
            out: dict[Any, Any] = {}
            for _ in range(self.count()):
                key = self.value(depth + 1)
                try:
                    out[key] = self.value(depth + 1)
                except TypeError as e:
                    raise CodecError("unhashable dict key") from e
            return out
        if tag == b"O":
            name, text = self.value(depth + 1), self.value(depth + 1)
            if type(name) is not str or type(text) is not str:
                raise CodecError("malformed opaque value")
            return Opaque(name, text)
        raise CodecError(f"unknown tag {tag!r}")


def decode(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Decode bytes produced by :func:`encode`; raises :class:`CodecError` on anything malformed."""
    dec = _Decoder(data, max_depth)
    value = dec.value(0)
    if dec.pos != len(dec.data):
        raise CodecError("trailing bytes after the value")
    return value


# --------------------------------------------------------------------------------------------------
# Frames: u32 length + payload; a zero-length frame marks the end of a stream.
# --------------------------------------------------------------------------------------------------


def frame(payload: bytes) -> bytes:
    """One length-prefixed frame."""
    return _U32.pack(len(payload)) + payload


END_FRAME = _U32.pack(0)
"""The frame that ends a stream."""

TEST_RECORD = struct.Struct("<Iid?")
"""Head of a program's per-test frame, after the tag ``b"T"``: expression index, exit code (negative:
killed by that signal), CPU seconds, killed by the wall backstop. The test child's own frame
follows; its payload is one kind byte (``RESULT_*``) and a body."""
RESULT_VALUE, RESULT_RAISE, RESULT_UNENCODABLE = b"o", b"r", b"u"
"""Kinds of a test child's result: a codec-encoded value; an exception type name; why the value
could not be encoded (both UTF-8)."""


def split_frames(data: bytes, max_frames: int = 1 << 20) -> tuple[list[bytes], bool]:
    """Split a stream into frame payloads; returns (payloads, ended). A truncated tail is dropped."""
    out: list[bytes] = []
    pos = 0
    while pos + 4 <= len(data) and len(out) < max_frames:
        n = _U32.unpack_from(data, pos)[0]
        if n == 0:
            return out, True
        if pos + 4 + n > len(data):
            break
        out.append(bytes(data[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    return out, False


def end_offset(data: bytes | bytearray, start: int = 0) -> tuple[int, bool]:
    """Scan frames from ``start``: returns (offset of the first incomplete frame, end frame seen)."""
    pos = start
    while pos + 4 <= len(data):
        n = _U32.unpack_from(data, pos)[0]
        if n == 0:
            return pos, True
        if pos + 4 + n > len(data):
            break
        pos += 4 + n
    return pos, False
