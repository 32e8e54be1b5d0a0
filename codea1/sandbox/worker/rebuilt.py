"""What a test sees of a value the entry point returned: a copy rebuilt by trusted code.

A test expression may use the value it gets from the entry point (``bool(f(3) == 6)``,
``[f(2) == 4, f(5) == 10]``, ``sorted(f(x))``). If it held the object the program returned, the
program's methods would run inside the test: an ``__eq__`` that always says True would pass every
comparison the test makes itself. So the guard in front of the entry point
(:mod:`codea1.sandbox.worker.test_scope`) hands the test :func:`rebuild` of the value, read with the
codec's rules (:mod:`codea1.sandbox.worker.value_codec`), never with the value's own methods:

* plain data (``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``bytearray``,
  and ``list``, ``tuple``, ``set``, ``frozenset``, ``dict`` of them) becomes a fresh copy of the
  built-in type; an instance of a subclass of one (``Counter``, a namedtuple, an ``IntEnum``)
  becomes the built-in value it holds, read through the built-in type's own methods; numpy values
  become Python values;
* anything else (an object of a class written in Python, a generator, a ``deque``, a function)
  becomes a :class:`ResultView`: the test may read its attributes, iterate it, take its ``len``,
  ``str``, ``repr``, ``bool``, ``int`` or ``float``, index it and call it (that is the program's
  behaviour, and every value these give is rebuilt in turn), but comparing it is the view's own
  doing: equal only to a view whose value has the same encoding, never equal to anything else,
  and no ordering. No method of the program's object ever decides a comparison the test makes.

A view is encoded as the value it stands for (:class:`~codea1.sandbox.worker.value_codec.Wrapped`),
so a test's value, and hence every verdict, is the same as when the test held the object itself.
A value nested deeper than :data:`~codea1.sandbox.worker.value_codec.MAX_DEPTH` levels (more than
the codec encodes) is a view from that level down.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from codea1.sandbox.worker.value_codec import (
    MAX_DEPTH,
    CodecError,
    Wrapped,
    _as_plain,
    _plain_base,
    _qualname,
    encode,
    unwrap,
)  # fmt: skip

_SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes})
"""Exact immutable types whose methods are all the interpreter's: handed over as they are."""
_SEQUENCES = frozenset({list, tuple, set, frozenset})


def rebuild(value: Any, _depth: int = 0) -> Any:
    """``value`` as a test may hold it (module docstring): plain data copied, the rest viewed."""
    t = type(value)
    if t in _SCALARS:
        return value
    if _depth > MAX_DEPTH:  # deeper than the codec encodes: viewed, so it stays as unencodable as it was
        return ResultView(value)
    if t in _SEQUENCES:
        items = list(value)  # an exact built-in type: iterated by the interpreter, no program code
        if not set(map(type, items)) <= _SCALARS:
            items = [rebuild(item, _depth + 1) for item in items]
        return items if t is list else t(items)
    if t is dict:
        pairs = list(value.items())
        if not set(map(type, value)) <= _SCALARS or not set(map(type, value.values())) <= _SCALARS:
            pairs = [(rebuild(k, _depth + 1), rebuild(v, _depth + 1)) for k, v in pairs]
        return dict(pairs)
    if t is bytearray:
        return bytearray(value)
    plain = _as_plain(value)
    if plain is not value:
        return rebuild(plain, _depth)
    try:
        is_sub, base = _plain_base(value, t)
    except BaseException:  # noqa: BLE001 - a broken subclass instance is viewed, as the codec makes it opaque
        is_sub, base = False, None
    if is_sub:
        return rebuild(base, _depth)
    return ResultView(value)


def _encoding(view: ResultView) -> bytes | None:
    try:
        return encode(unwrap(view), 1 << 20)
    except CodecError:
        return None


class ResultView(Wrapped):
    """A value the entry point returned that is not plain data, as a test sees it (module docstring)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:  # only for names the view does not define itself
        if name.startswith("_"):
            raise AttributeError(name)
        return rebuild(getattr(unwrap(self), name))

    def __iter__(self) -> Iterator[Any]:
        for item in iter(unwrap(self)):
            yield rebuild(item)

    def __len__(self) -> int:
        return len(unwrap(self))

    def __bool__(self) -> bool:
        return bool(unwrap(self))

    def __int__(self) -> int:
        return int(unwrap(self))

    def __float__(self) -> float:
        return float(unwrap(self))

    def __str__(self) -> str:
        return str.__str__(str(unwrap(self)))  # an exact str, even from a str subclass

    def __repr__(self) -> str:
        return str.__str__(repr(unwrap(self)))

    def __getitem__(self, key: Any) -> Any:
        return rebuild(unwrap(self)[key])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return rebuild(unwrap(self)(*args, **kwargs))

    def __eq__(self, other: object) -> bool:  # never NotImplemented: the other side's __eq__ is not asked
        if type(other) is not ResultView:
            return False
        mine = _encoding(self)
        return mine is not None and mine == _encoding(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((ResultView, _qualname(unwrap(self))))

    def _unordered(self, other: object) -> bool:
        raise TypeError("a value the entry point returned that is not plain data has no order")

    __lt__ = __le__ = __gt__ = __ge__ = _unordered
