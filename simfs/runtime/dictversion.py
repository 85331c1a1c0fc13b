"""Whether a dict changed since a moment, without reading its entries. CPython 3.10-3.13 keep in
every dict a version tag (PEP 509) that each change of the dict replaces with a value no dict had
before, so an equal tag means no change in between: one read instead of a walk over thousands of
entries whose objects a run has pushed out of the CPU's caches (``sys.modules`` between the runs
of a series). Where the tag is missing or does not behave so (checked once, on a dict of our
own), every dict counts as changed and callers compare the entries."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

# PyDictObject: PyObject_HEAD (reference count, type), ma_used, then ma_version_tag
_OFFSET = ctypes.sizeof(ctypes.c_ssize_t) * 2 + ctypes.sizeof(ctypes.c_void_p)


def _tag_of(d: dict[Any, Any]) -> ctypes.c_uint64:
    return ctypes.c_uint64.from_address(id(d) + _OFFSET)


def _tags_work() -> bool:
    """Every change of a probe dict gives it a new tag (and nothing else does)."""
    if sys.implementation.name != "cpython" or not (3, 10) <= sys.version_info[:2] <= (3, 13):
        return False
    probe: dict[str, int] = {}
    tag = _tag_of(probe)
    seen = [tag.value]
    for change in (lambda: probe.__setitem__("a", 1), lambda: probe.__setitem__("a", 2), lambda: probe.pop("a"),
                   lambda: probe.update(b=3), lambda: probe.clear()):
        change()
        seen.append(tag.value)
    unchanged = tag.value
    _ = dict(probe), probe.get("b"), len(probe)
    return len(set(seen)) == len(seen) and tag.value == unchanged


TAGS_WORK = _tags_work()


def version(d: dict[Any, Any]) -> int | None:
    """The dict's version tag now: a value no other state of any dict had (None where tags do not
    work)."""
    return _tag_of(d).value if TAGS_WORK else None


class DictWatch:
    """One dict's version at the last ``mark()``: ``unchanged()`` says whether the dict is the
    same now (False whenever that cannot be told)."""

    __slots__ = ("_dict", "_seen", "_tag")

    def __init__(self, d: dict[Any, Any]) -> None:
        self._dict = d  # kept alive: its tag is read at its address
        self._tag = _tag_of(d) if TAGS_WORK else None
        self._seen: int | None = None

    def watches(self, d: dict[Any, Any]) -> bool:
        return d is self._dict

    def mark(self) -> None:
        self._seen = None if self._tag is None else self._tag.value

    def unchanged(self) -> bool:
        return self._tag is not None and self._seen == self._tag.value
