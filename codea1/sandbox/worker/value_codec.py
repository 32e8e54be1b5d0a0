"""Safe, typed binary encoding of plain data, and the length-prefixed frames that carry it.

Values returned by untrusted code cross to the trusted side only in this encoding: ``None``,
``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set``
and ``frozenset``, nested. An instance of a subclass of one of these (``Counter``, ``OrderedDict``,
a namedtuple, an ``IntEnum``) is encoded as the built-in value it holds, read through the built-in
type's own methods (Python's ``==`` compares them so too). An instance of a class written in Python
becomes an :class:`ObjectState`: its class's qualified name and its attributes (``__dict__`` and
``__slots__`` values, sorted by name, encoded recursively; a reference back to an object that
encloses it becomes a :class:`CycleRef`). Anything else (functions, classes, C-implemented objects
such as ``deque`` or ``Decimal``) has no state this codec can inspect and becomes an
:class:`Opaque` (qualified type name + capped repr). The decoder never executes anything: it walks
bytes with explicit size and depth caps and raises :class:`CodecError` on any malformed input.
The sandbox worker loads this module, which must stay lean.
"""

from __future__ import annotations

import hashlib
import marshal
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


class TooLarge(CodecError):
    """A value whose encoding exceeds the byte cap (it may still be digested: :func:`digest`)."""


class Opaque:
    """A value with no state the codec can inspect: only its type name and repr are known (immutable).

    Trusted-side equality never treats it as equal to anything but an identical opaque value, and a
    test whose oracle value holds one is not counted (docs/algorithm.md, reference bug 13.2).

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


class ObjectState:
    """An object of a class written in Python: its class and its attributes (immutable).

    ``qualname`` is ``module.QualifiedName`` of the object's class; ``attrs`` holds ``(name, value)``
    pairs sorted by name, from the instance ``__dict__`` and the class's ``__slots__`` (names that
    start and end with ``__`` are left out). Values are decoded values, possibly :class:`CycleRef`.
    ``==`` here is plain structural equality; verdicts use
    :func:`codea1.sandbox.equality.values_equal`, which compares the attributes with its own rules.
    """

    __slots__ = ("qualname", "attrs")
    qualname: str
    attrs: tuple[tuple[str, Any], ...]

    def __init__(self, qualname: str, attrs: tuple[tuple[str, Any], ...]) -> None:
        object.__setattr__(self, "qualname", qualname)
        object.__setattr__(self, "attrs", attrs)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ObjectState is immutable (cannot set {name!r})")

    def __eq__(self, other: object) -> bool:
        if type(other) is not ObjectState:
            return NotImplemented
        return (self.qualname, self.attrs) == (other.qualname, other.attrs)

    def __hash__(self) -> int:  # attribute values may be unhashable (lists): hash the shape only
        return hash((ObjectState, self.qualname, tuple(name for name, _ in self.attrs)))

    def __repr__(self) -> str:
        return f"ObjectState(qualname={self.qualname!r}, attrs={self.attrs!r})"


class CycleRef:
    """A reference back to an enclosing object: ``up`` object levels above (0 = the innermost)."""

    __slots__ = ("up",)
    up: int

    def __init__(self, up: int) -> None:
        object.__setattr__(self, "up", up)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"CycleRef is immutable (cannot set {name!r})")

    def __eq__(self, other: object) -> bool:
        if type(other) is not CycleRef:
            return NotImplemented
        return self.up == other.up

    def __hash__(self) -> int:
        return hash((CycleRef, self.up))

    def __repr__(self) -> str:
        return f"CycleRef(up={self.up})"


class Wrapped:
    """A trusted stand-in for a value (what a test sees of the entry point's result:
    :class:`codea1.sandbox.worker.rebuilt.ResultView`): encoded as the value it stands for."""

    __slots__ = ("_wrapped",)

    def __init__(self, value: Any) -> None:
        _WRAPPED.__set__(self, value)


_WRAPPED = Wrapped.__dict__["_wrapped"]


def unwrap(stand_in: Wrapped) -> Any:
    """The value a :class:`Wrapped` stands for."""
    return _WRAPPED.__get__(stand_in, Wrapped)


def _qualname(value: Any) -> str:
    t = type(value)
    try:
        name = f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', '?')}"
    except BaseException:  # noqa: BLE001 - a hostile metaclass must not break encoding
        return "?"
    return name if type(name) is str else "?"


def _safe_repr(value: Any) -> str:
    try:
        text = repr(value)
    except BaseException:  # noqa: BLE001 - a hostile __repr__ must not break encoding
        return "<unrepresentable>"
    if type(text) is not str:
        return "<unrepresentable>"
    return text[:REPR_CAP]


def _as_plain(value: Any) -> Any:
    """numpy scalars/arrays (only if numpy is already imported) become Python values."""
    try:
        if getattr(type(value), "__module__", "") == "numpy" and hasattr(value, "tolist"):
            return value.tolist()
    except BaseException:  # noqa: BLE001 - a hostile type must not break encoding
        pass
    return value


_IMMUTABLE_TYPE = 1 << 8
"""``Py_TPFLAGS_IMMUTABLETYPE``: set on every built-in and C-implemented type, never on a class
written in Python (whose instances keep all their state in ``__dict__`` and slots)."""
_OBJECT_SIZE = object.__basicsize__


def _adds_no_c_state(cls: type) -> bool:
    """True for a class written in Python, or a C type whose instances hold nothing beyond
    ``object`` (``typing.Generic`` where it is written in C); False for ``deque``, ``Exception``…"""
    flags: int = type.__dict__["__flags__"].__get__(cls)
    if not flags & _IMMUTABLE_TYPE:
        return True
    return bool(cls.__basicsize__ == _OBJECT_SIZE and cls.__itemsize__ == 0)


class _SlotProbe:
    __slots__ = ("x",)


_MEMBER_DESCRIPTOR = type(_SlotProbe.__dict__["x"])

_PLAIN_BASES: tuple[tuple[type, Any], ...] = (
    (int, int.__int__),
    (float, float.__float__),
    (complex, lambda v: complex(complex.__dict__["real"].__get__(v), complex.__dict__["imag"].__get__(v))),
    (str, str.__str__),
    (bytes, lambda v: bytes.__getitem__(v, slice(None))),
    (bytearray, lambda v: bytes(bytearray.__getitem__(v, slice(None)))),
    (list, lambda v: list(list.__iter__(v))),
    (tuple, lambda v: tuple(tuple.__iter__(v))),
    (dict, lambda v: dict(dict.items(v))),
    (set, lambda v: set(set.__iter__(v))),
    (frozenset, lambda v: frozenset(frozenset.__iter__(v))),
)
"""Plain types and how to read the built-in value held by an instance of a subclass, through the
built-in type's own methods (an override in the subclass is never called)."""


def _plain_base(value: Any, t: type) -> tuple[bool, Any]:
    """(True, the built-in value) when ``t`` subclasses a plain type, else (False, None)."""
    for base, read in _PLAIN_BASES:
        if issubclass(t, base):
            return True, read(value)
    return False, None


def _mangle(cls: type, name: str) -> str:
    if name.startswith("__") and not name.endswith("__"):
        return f"_{cls.__name__.lstrip('_')}{name}"
    return name


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _object_state(value: Any, t: type) -> list[tuple[str, Any]] | None:
    """The attributes of an instance of a class written in Python, sorted by name; ``None`` for
    anything else (or when reading them fails). Reads the instance ``__dict__`` and the member
    descriptors of ``__slots__`` only: no property, ``__getattr__`` or ``__getattribute__`` runs."""
    try:
        mro = type.__dict__["__mro__"].__get__(t)
        if (
            mro[-1] is not object
            or type.__dict__["__flags__"].__get__(t) & _IMMUTABLE_TYPE  # object(), Ellipsis, C types
            or any(not isinstance(c, type) or not _adds_no_c_state(c) for c in mro[:-1])
        ):
            return None
        attrs: dict[str, Any] = {}
        for cls in reversed(mro[:-1]):
            namespace = type.__dict__["__dict__"].__get__(cls)
            slots = namespace.get("__slots__", ())
            for name in (slots,) if type(slots) is str else tuple(slots):
                if type(name) is not str or _is_dunder(name):
                    continue
                key = _mangle(cls, name)
                desc = namespace.get(key)
                if type(desc) is _MEMBER_DESCRIPTOR:
                    try:
                        attrs[key] = desc.__get__(value, cls)
                    except AttributeError:  # slot never assigned
                        pass
        try:
            inst = object.__getattribute__(value, "__dict__")
        except AttributeError:
            inst = None
        if type(inst) is dict:
            for name, item in list(dict.items(inst)):
                if type(name) is str and not _is_dunder(name):
                    attrs[name] = item
        return sorted(attrs.items(), key=lambda kv: kv[0])
    except BaseException:  # noqa: BLE001 - hostile classes and state become opaque, never a crash
        return None


class _Encoder:
    def __init__(self, max_bytes: int, max_depth: int) -> None:
        self.out = bytearray()
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.enclosing: dict[int, int] = {}
        """id → level of each object being encoded (the path from the root), for cycles."""

    def put(self, data: bytes) -> None:
        if len(self.out) + len(data) > self.max_bytes:
            raise TooLarge(f"too large (> {self.max_bytes} bytes)")
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
                raise TooLarge(f"too large (> {self.max_bytes} bytes)")
            self.put_blob(b"i", v.to_bytes(nbytes, "little", signed=True))
        elif t is float:
            self.put(b"f" + _F64.pack(v))
        elif t is complex:
            self.put(b"c" + _F64.pack(v.real) + _F64.pack(v.imag))
        elif t is str:
            if len(v) > self.max_bytes:
                raise TooLarge(f"too large (> {self.max_bytes} bytes)")
            self.put_blob(b"s", v.encode("utf-8", "surrogatepass"))
        elif t is bytes or t is bytearray:
            if len(v) > self.max_bytes:
                raise TooLarge(f"too large (> {self.max_bytes} bytes)")
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
            self.other(v, t, depth)

    def other(self, v: Any, t: type, depth: int) -> None:
        """A value that is not exactly a plain type: its plain form, its state, or an opaque form."""
        if Wrapped in type.__dict__["__mro__"].__get__(t):
            self.value(_WRAPPED.__get__(v, Wrapped), depth)
            return
        plain = _as_plain(v)
        if plain is not v:
            self.value(plain, depth)
            return
        try:
            is_sub, base = _plain_base(v, t)
        except BaseException:  # noqa: BLE001 - a broken subclass instance is opaque
            is_sub, base = False, None
        if is_sub:
            self.value(base, depth)
            return
        level = self.enclosing.get(id(v))
        if level is not None:
            self.put(b"R" + _U32.pack(len(self.enclosing) - 1 - level))
            return
        attrs = _object_state(v, t)
        name = _qualname(v)[:REPR_CAP]
        if attrs is None:
            self.put(b"O")
            self.value(name, depth + 1)
            self.value(_safe_repr(v), depth + 1)
            return
        self.enclosing[id(v)] = len(self.enclosing)
        self.put(b"A")
        self.value(name, depth + 1)
        self.put(_U32.pack(len(attrs)))
        for key, item in attrs:
            self.value(key, depth + 1)
            self.value(item, depth + 1)
        del self.enclosing[id(v)]


class _DigestEncoder(_Encoder):
    """The encoder that feeds a running SHA-256 instead of a buffer: no encoding is ever held."""

    def __init__(self, max_bytes: int, max_depth: int) -> None:
        super().__init__(max_bytes, max_depth)
        self.hash = hashlib.sha256()
        self.length = 0

    def put(self, data: bytes) -> None:
        if self.length + len(data) > self.max_bytes:
            raise TooLarge(f"too large to digest (> {self.max_bytes} bytes)")
        self.hash.update(data)
        self.length += len(data)


DIGEST_MAX_BYTES = 1 << 36
"""Largest encoding :func:`digest` hashes (64 GiB: more than any sandboxed program can build)."""


DIGEST_BYTES = 41
"""A digest: the tag of its stream (1 byte), SHA-256 of the stream (32 bytes), the stream's length
(8 bytes, little-endian)."""

_DIGEST_VALUE, _DIGEST_LIST, _DIGEST_TUPLE, _DIGEST_CODEC = b"V", b"L", b"T", b"C"
"""The first byte of every stream :func:`digest` hashes, one per way of writing it: ``marshal`` of
the whole value; a list's or a tuple's count then ``marshal`` of each element; this module's
encoding. What follows the tag is self-delimiting (``marshal`` and the codec both are), so a stream
names its value and its type: no value written one way can hash the bytes of another written
another way (a list's header is not also the head of an int's ``marshal``)."""
_COUNT = struct.Struct("<Q")


def digest(value: Any, max_bytes: int = DIGEST_MAX_BYTES, max_depth: int = MAX_DEPTH) -> bytes:
    """A fingerprint of ``value`` that two processes compute alike for equal plain data, without
    holding an encoding of it whole (:data:`DIGEST_BYTES` long).

    Fast scheme: SHA-256 of ``marshal`` version 0 of each element of a list or tuple (of the value
    itself otherwise), after a tag naming the container and its length. Version 0 writes every
    string in full (no interning flags, no back-references), so the bytes depend on the value only,
    not on which objects it shares. Any value ``marshal`` refuses (an instance of a subclass or a
    class, a value nested too deep) takes the slow scheme: SHA-256 of this module's encoding, fed
    as it is produced. Every hashed stream starts with its own tag (:data:`_DIGEST_VALUE` ...), so
    equal digests mean equal types as well as equal contents. Set and dict order count, as in
    :func:`encode`. MBPP/255's 1.7 million 77-tuples (1.2 GB) take about 6 s in the fast scheme,
    150 s in the slow one. :class:`CodecError` as :func:`encode` when even the slow scheme cannot."""
    try:
        return _marshal_digest(value)
    except (ValueError, RecursionError):  # not marshalable as such: the encoding itself
        pass
    enc = _DigestEncoder(max_bytes, max_depth)
    try:
        enc.put(_DIGEST_CODEC)
        enc.value(value, 0)
    except RecursionError as e:
        raise CodecError("too deep (recursion)") from e
    return _DIGEST_CODEC + enc.hash.digest() + enc.length.to_bytes(8, "little")


def _marshal_digest(value: Any) -> bytes:
    """The fast scheme of :func:`digest`; ``ValueError`` when ``marshal`` refuses a part."""
    h = hashlib.sha256()
    t = type(value)
    if t is list or t is tuple:
        items = list(value)
        tag = _DIGEST_LIST if t is list else _DIGEST_TUPLE
        header = tag + _COUNT.pack(len(items))
        h.update(header)
        length = len(header)
        for item in items:
            data = marshal.dumps(item, 0)
            h.update(data)
            length += len(data)
    else:
        tag = _DIGEST_VALUE
        data = marshal.dumps(value, 0)
        h.update(tag)
        h.update(data)
        length = 1 + len(data)
    return tag + h.digest() + length.to_bytes(8, "little")


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
        self.objects = 0
        """How many :class:`ObjectState` values enclose the current position."""

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
        if tag == b"A":
            return self.object_state(depth)
        if tag == b"R":
            up: int = _U32.unpack(self.take(4))[0]
            if up >= self.objects:
                raise CodecError("cycle reference outside its objects")
            return CycleRef(up)
        raise CodecError(f"unknown tag {tag!r}")

    def object_state(self, depth: int) -> ObjectState:
        name = self.value(depth + 1)
        if type(name) is not str:
            raise CodecError("malformed object")
        self.objects += 1
        attrs: list[tuple[str, Any]] = []
        for _ in range(self.count()):
            key = self.value(depth + 1)
            if type(key) is not str or (attrs and key <= attrs[-1][0]):
                raise CodecError("object attributes must be distinct names in sorted order")
            attrs.append((key, self.value(depth + 1)))
        self.objects -= 1
        return ObjectState(name, tuple(attrs))


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
RESULT_VALUE, RESULT_RAISE, RESULT_UNENCODABLE, RESULT_DIGEST = b"o", b"r", b"u", b"h"
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
