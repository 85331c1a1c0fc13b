"""What a process that ran rank code sends the host, and how the host reads it: msgpack (msgspec),
never pickle. None, bool, 64-bit int, float, str, bytes, list and a dict of str keys are msgpack's
own; every other value the host takes is a tagged extension whose payload is plain fields, and the
host rebuilds it from those fields by a rule of its own per tag: tuples, sets, dicts of other keys,
big ints, the standard library's plain values (dates, Decimal, Fraction, paths, UUIDs, os's result
records), numpy arrays and scalars of numeric, bytes or str dtypes and torch tensors of numeric
dtypes (dtype, shape and their bytes, never an object dtype), exceptions of the standard library's,
simfs's, torch.distributed's and filelock's classes (their arguments and attributes), and the
records simfs and scenarios register here (results, traces, findings: their fields). Nothing a
message names can run code the sender chose in the host, and a message the host does not take
raises Untrusted naming what it holds. The sending side, ``dumps``, first stands in for what the
host would refuse: an exception of another class crosses as its names, builtin bases, arguments and
text, which the host rebuilds as a simfs.RankError that keeps those bases (rankerrors.py), any other
object as a Foreign naming its type, with its repr."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import fractions
import importlib
import math
import os
import pathlib
import re
import sys
import threading
import types
import uuid
from collections.abc import Callable
from typing import Any, cast

import msgspec
from msgspec.msgpack import Ext

from . import rankerrors

# exception classes the host rebuilds, by module: the standard library's that file and process code
# raises (importing these modules runs nothing of note), simfs's, torch.distributed's and filelock's
EXCEPTION_MODULES = frozenset({
    "builtins", "shutil", "subprocess", "socket", "queue", "concurrent.futures._base", "json.decoder", "pickle",
    "_pickle", "zipfile", "tarfile", "zlib", "struct", "_struct", "csv", "_csv", "configparser", "tomllib",
    "simfs.errors", "torch.distributed", "filelock._error",
})
MAX_DEPTH = 100  # tagged values inside tagged values: deeper messages are refused, not recursed into
MAX_TEXT = 1 << 20  # characters of a big int's (hexadecimal) or a Decimal's text
MAX_NAME = 1024  # characters of a rank's exception class's module or qualified name
MAX_BASES = 16  # builtin classes a rank's exception class derives from
# numpy dtypes an array may have: booleans, integers, floats and complex numbers, fixed bytes and str
_DTYPE = re.compile(r"[<>|=]?(?:b1|[iu][1248]|f[248]|c(?:8|16)|[SU][0-9]{1,9})")

(TUPLE, DICT, SET, FROZENSET, BIGINT, BYTEARRAY, COMPLEX, NDARRAY, NPSCALAR, DATE, DATETIME, TIME, TIMEDELTA,
 TIMEZONE, DECIMAL, FRACTION, PATH, UUID, STRUCTSEQ, RANGE, SLICE, DEQUE, ORDEREDDICT, EXCEPTION, RECORD, CALL,
 OBJECT, TENSOR, SURROGATES, RANK_EXCEPTION) = range(1, 31)
# torch dtypes a tensor may have (its values; requires_grad, device and subclass stay behind)
TENSOR_DTYPES = frozenset({"float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
                           "bool", "complex64", "complex128"})

_PATHS = {cls.__name__: cls for cls in (pathlib.PurePath, pathlib.PurePosixPath, pathlib.Path, pathlib.PosixPath)}
_STRUCTSEQS = {cls.__name__: cls for cls in (os.stat_result, os.statvfs_result, os.times_result, os.uname_result)}
_BUILDERS: dict[tuple[str, str], Any] = {}  # (module, qualified name) -> what register() named
_ENCODE = msgspec.msgpack.Encoder().encode


class Untrusted(ValueError):
    """A message holds something the host does not load."""


@dataclasses.dataclass(frozen=True)
class Foreign:
    """Stands, in the host, for a value of a class it does not load (rank code never runs in the
    host): the value's type and its repr, as the process that made it wrote them."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return f"<{self.type_name} (not loaded in the host): {self.text}>"


def register(*objects: type | Callable[..., Any]) -> None:
    """Let the host load ``objects`` from a confined child's message: simfs's and scenarios' own
    records (dataclasses, msgspec Structs and named tuples, rebuilt from their fields) and the
    functions their ``__reduce__`` names (called with plain arguments). Register only what builds
    an object by storing fields: the sender chooses them."""
    for obj in objects:
        _BUILDERS[obj.__module__, obj.__qualname__] = obj


def loadable(cls: type) -> bool:
    """The host loads instances of ``cls`` from a confined child's message (records included)."""
    return cls in _BUILTIN or cls in _ENCODERS or _registered(cls) or _standard_exception(cls)


def dumps(value: Any) -> bytes:
    """``value`` as a message ``load(..., records=True)`` rebuilds in the host: what the host would
    refuse is replaced by its stand-in (RankError, Foreign)."""
    return _ENCODE(_wire(value, 0))


def load(data: bytes, *, records: bool = False) -> Any:
    """A message as plain data (and, with ``records``, the registered records); raises Untrusted
    naming what it may not hold."""
    try:
        return (_WITH_RECORDS if records else _PLAIN).decode(data)
    except Untrusted:
        raise
    except (msgspec.DecodeError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        raise Untrusted(f"a malformed message ({type(exc).__name__}: {exc})") from None


def ext_hook(records: bool) -> Callable[[int, memoryview], Any]:
    """The decoding of tagged values, for a msgspec decoder of typed messages (port/schema.py)."""
    return _WITH_RECORDS_HOOK if records else _PLAIN_HOOK


def wire(value: Any) -> Any:
    """``value`` as msgpack's own types and tagged values, for a typed message's field."""
    return _wire(value, 0)


# -- sending ---------------------------------------------------------------------------------------
_NATIVE = frozenset({type(None), bool, float, bytes})
_BUILTIN = _NATIVE | {str, int, list, tuple, dict}  # msgpack's own, or rebuilt as themselves


def _wire(obj: Any, depth: int) -> Any:
    kind = type(obj)
    if kind in _NATIVE:
        return obj
    if kind is str:
        return obj if _utf8(obj) else _ext(SURROGATES, obj.encode("utf-8", "surrogatepass"))
    if kind is int:
        return obj if -(1 << 63) <= obj < 1 << 64 else _ext(BIGINT, format(obj, "x"))
    if depth > MAX_DEPTH:
        raise Untrusted(f"a value nested deeper than {MAX_DEPTH} levels")
    depth += 1
    if kind is list:
        return obj if _flat(obj) else [_wire(item, depth) for item in obj]
    if kind is dict:
        if not obj:
            return obj
        if all(type(key) is str for key in obj) and _utf8("".join(obj)):
            return obj if _flat(obj.values()) else {key: _wire(item, depth) for key, item in obj.items()}
        return _ext(DICT, [_wire(part, depth) for pair in obj.items() for part in pair])
    if kind is tuple:
        return _ext(TUPLE, obj if _flat(obj) else [_wire(item, depth) for item in obj])
    encode = _ENCODERS.get(kind)
    if encode is not None:
        return encode(obj, depth)
    return _other(obj, depth)


_SCALARS = frozenset({type(None), bool, float, bytes})
_FLAT = _SCALARS | {str, int}


def _utf8(text: str) -> bool:
    """Whether ``text`` is valid as UTF-8 (not a name decoded with surrogateescape, say)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _flat(items: Any) -> bool:
    """Whether ``items`` are all msgpack's own scalars (ints of 64 bits, UTF-8 text), told at C
    speed: a list of floats, of names, or a system call's path and numbers crosses without a
    call per item."""
    kinds = set(map(type, items))
    if kinds <= _SCALARS:
        return True
    if not kinds <= _FLAT:
        return False
    if str in kinds and not _utf8("".join([item for item in items if type(item) is str])):
        return False
    if int in kinds:
        ints = [item for item in items if type(item) is int]
        return bool(min(ints) >= -(1 << 63) and max(ints) < 1 << 64)
    return True


def _ext(code: int, fields: Any) -> Ext:
    return Ext(code, _ENCODE(fields))


def _items(code: int) -> Callable[[Any, int], Ext]:
    return lambda obj, depth: _ext(code, [_wire(item, depth) for item in obj])


def _datetime_fields(obj: datetime.datetime) -> list[Any]:
    return [obj.year, obj.month, obj.day, obj.hour, obj.minute, obj.second, obj.microsecond,
            _wire(obj.tzinfo, 0), obj.fold]


_ENCODERS: dict[type, Callable[[Any, int], Ext]] = {
    set: _items(SET), frozenset: _items(FROZENSET),
    bytearray: lambda obj, depth: _ext(BYTEARRAY, bytes(obj)),
    complex: lambda obj, depth: _ext(COMPLEX, [obj.real, obj.imag]),
    datetime.date: lambda obj, depth: _ext(DATE, [obj.year, obj.month, obj.day]),
    datetime.datetime: lambda obj, depth: _ext(DATETIME, _datetime_fields(obj)),
    datetime.time: lambda obj, depth: _ext(TIME, [obj.hour, obj.minute, obj.second, obj.microsecond,
                                                  _wire(obj.tzinfo, 0), obj.fold]),
    datetime.timedelta: lambda obj, depth: _ext(TIMEDELTA, [obj.days, obj.seconds, obj.microseconds]),
    datetime.timezone: lambda obj, depth: _ext(TIMEZONE, [obj.utcoffset(None).total_seconds(), obj.tzname(None)]),
    decimal.Decimal: lambda obj, depth: _ext(DECIMAL, str(obj)),
    fractions.Fraction: lambda obj, depth: _ext(FRACTION, [_wire(obj.numerator, 0), _wire(obj.denominator, 0)]),
    uuid.UUID: lambda obj, depth: _ext(UUID, obj.bytes),
    range: lambda obj, depth: _ext(RANGE, [_wire(obj.start, 0), _wire(obj.stop, 0), _wire(obj.step, 0)]),
    slice: lambda obj, depth: _ext(SLICE, [_wire(obj.start, depth), _wire(obj.stop, depth), _wire(obj.step, depth)]),
    collections.deque: lambda obj, depth: _ext(DEQUE, [[_wire(item, depth) for item in obj], obj.maxlen]),
    collections.OrderedDict: lambda obj, depth: _ext(ORDEREDDICT, [_wire(p, depth) for pair in obj.items()
                                                                   for p in pair]),
    **{cls: lambda obj, depth: _ext(PATH, [type(obj).__name__, str(obj)]) for cls in _PATHS.values()},
    **{cls: lambda obj, depth: _ext(STRUCTSEQ, _structseq_fields(obj, depth)) for cls in _STRUCTSEQS.values()},
}


def _structseq_fields(obj: Any, depth: int) -> list[Any]:
    """An os result record: its class's name, its fields (a list: numbers cross as they are, a
    stat result in a third of the time a tuple took), its named extra fields (as it pickles)."""
    fields, extra = obj.__reduce__()[1]
    return [type(obj).__name__, _wire(list(fields), depth), _wire(extra, depth)]


def _other(obj: Any, depth: int) -> Any:
    """A value of a class without an encoder of its own: an array, an exception, a record, a
    registered function, or its stand-in."""
    cls = type(obj)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, (numpy.ndarray, numpy.generic)) and _DTYPE.fullmatch(obj.dtype.str):
        if isinstance(obj, numpy.generic):
            return _ext(NPSCALAR, [obj.dtype.str, obj.tobytes()])
        return _ext(NDARRAY, [obj.dtype.str, list(obj.shape), numpy.ascontiguousarray(obj).tobytes()])
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        tensor = _tensor(torch, obj)
        if tensor is not None:
            return tensor
    if isinstance(obj, BaseException):
        return _exception(obj, depth)
    if _registered(cls):
        return _ext(RECORD, [cls.__module__, cls.__qualname__, [_wire(f, depth) for f in _fields(obj)]])
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
        module, name = getattr(obj, "__module__", None) or "", getattr(obj, "__qualname__", "")
        if (module, name) in _BUILDERS or (isinstance(obj, type) and _standard_exception(obj)):
            return _ext(OBJECT, [module, name])
        return _wire(Foreign(f"{module}.{name}", "a class or function"), depth)
    reduced = _reduced_by_builder(obj)
    if reduced is not None:
        builder, args = reduced
        return _ext(CALL, [builder.__module__, builder.__qualname__, [_wire(a, depth) for a in args]])
    return _wire(Foreign(f"{cls.__module__}.{cls.__qualname__}", _text(repr, obj)[:2000]), depth)


def _tensor(torch: Any, tensor: Any) -> Ext | None:
    """A tensor's dtype, shape and bytes (on the CPU), or None when it has none of its own (a
    distributed or meta tensor, a dtype not listed): it crosses as a Foreign."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in TENSOR_DTYPES:
        return None
    try:
        flat = tensor.detach().cpu().contiguous()
        data = flat.reshape(-1).view(torch.uint8).numpy().tobytes()
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return None
    return _ext(TENSOR, [dtype, list(flat.shape), data])


def _exception(exc: BaseException, depth: int) -> Any:
    cls = type(exc)
    if (_standard_exception(cls) or _registered(cls)) and not getattr(cls, "simfs_rebuilt", False):
        try:
            reduced = exc.__reduce__()
            if reduced[0] is cls and type(reduced[1]) is tuple:
                state = reduced[2] if len(reduced) > 2 else None
                state = {k: v for k, v in state.items() if type(k) is str} if isinstance(state, dict) else {}
                return _ext(EXCEPTION, [cls.__module__, cls.__qualname__, [_wire(a, depth) for a in reduced[1]],
                                        {k: _wire(v, depth) for k, v in state.items()}])
        except Untrusted:
            raise
        except Exception:  # noqa: BLE001 - its own __reduce__ failed: it crosses as a RankError
            pass
    module, qualname, bases, text, args, fields = rankerrors.described(exc, _text(str, exc))
    return _ext(RANK_EXCEPTION, [module, qualname, bases, text, [_wire(a, depth) for a in args],
                                 {k: _wire(v, depth) for k, v in fields.items()}])


def _reduced_by_builder(obj: Any) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
    """(a registered builder, its arguments) when the value's own __reduce__ names one (a Profile)."""
    if getattr(type(obj), "__reduce__", None) is object.__reduce__:
        return None
    try:
        reduced = obj.__reduce__()
    except Exception:  # noqa: BLE001 - a broken __reduce__: the value crosses as a Foreign
        return None
    if type(reduced) is tuple and len(reduced) == 2 and type(reduced[1]) is tuple:
        builder: Callable[..., Any] = reduced[0]
        if _BUILDERS.get((getattr(builder, "__module__", ""), getattr(builder, "__qualname__", ""))) is builder:
            return builder, reduced[1]
    return None


def _text(show: Callable[[Any], str], obj: Any) -> str:
    try:
        return show(obj)
    except Exception as exc:  # noqa: BLE001 - the value's own repr failed: say so instead
        return f"(its {show.__name__} raised {type(exc).__name__})"


def _registered(cls: type) -> bool:
    return _BUILDERS.get((cls.__module__, cls.__qualname__)) is cls


def _standard_exception(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, BaseException) and cls.__module__ in EXCEPTION_MODULES


def _fields(obj: Any) -> list[Any]:
    """A record's fields, in their declared order."""
    if isinstance(obj, msgspec.Struct):
        return [getattr(obj, name) for name in type(obj).__struct_fields__]
    if isinstance(obj, tuple):  # a named tuple
        return list(obj)
    return [getattr(obj, f.name) for f in dataclasses.fields(obj)]


# -- loading ---------------------------------------------------------------------------------------
class _Hook:
    """Rebuilds tagged values; each rule checks the fields it takes."""

    def __init__(self, records: bool) -> None:
        self.records = records
        self.nesting = threading.local()
        self.decode: Callable[[memoryview], Any] = msgspec.msgpack.Decoder(ext_hook=self).decode

    def __call__(self, code: int, data: memoryview) -> Any:
        depth = getattr(self.nesting, "depth", 0)
        if depth >= MAX_DEPTH:
            raise Untrusted(f"a value nested deeper than {MAX_DEPTH} levels")
        self.nesting.depth = depth + 1
        try:
            fields = self.decode(data)
            rule = _RULES.get(code)
            if rule is None:
                raise Untrusted(f"a value of unknown tag {code}")
            return rule(self, fields)
        finally:
            self.nesting.depth = depth


def _of(fields: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(fields, kind) or (type(fields) is bool and kind is not bool):
        raise Untrusted(f"{what}: got {type(fields).__name__}")
    return fields


def _pairs(fields: Any, what: str) -> list[tuple[Any, Any]]:
    items = _of(fields, list, what)
    if len(items) % 2:
        raise Untrusted(f"{what}: an odd number of keys and values")
    return list(zip(items[::2], items[1::2]))


def _number(text: Any, kind: Callable[[str], Any], what: str) -> Any:
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise Untrusted(f"{what}: not a number's text")
    return kind(text)


def _bigint(text: str) -> int:
    return int(text, 16)  # hexadecimal: no limit on digits (sys.set_int_max_str_digits), linear time


def _fixed(fields: Any, count: int, what: str) -> list[Any]:
    items: list[Any] = _of(fields, list, what)
    if len(items) != count:
        raise Untrusted(f"{what}: {len(items)} fields, not {count}")
    return items


def _tz(value: Any) -> datetime.tzinfo | None:
    return _of(value, (datetime.timezone, type(None)), "a time zone")  # type: ignore[no-any-return]


def _datetime(fields: Any) -> datetime.datetime:
    y, mo, d, h, mi, s, us, tz, fold = _fixed(fields, 9, "a datetime")
    return datetime.datetime(y, mo, d, h, mi, s, us, tzinfo=_tz(tz), fold=fold)


def _time(fields: Any) -> datetime.time:
    h, mi, s, us, tz, fold = _fixed(fields, 6, "a time")
    return datetime.time(h, mi, s, us, tzinfo=_tz(tz), fold=fold)


def _array(fields: Any) -> Any:
    dtype, shape, data = _fixed(fields, 3, "an array")
    numpy = _numpy()
    kind = _dtype(numpy, dtype)
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise Untrusted(f"an array's shape: {shape!r}")
    if not isinstance(data, bytes) or len(data) != math.prod(shape) * kind.itemsize:
        raise Untrusted(f"an array of shape {shape} and dtype {kind} with the wrong number of bytes")
    return numpy.frombuffer(data, kind).reshape(shape).copy()


def _scalar(fields: Any) -> Any:
    dtype, data = _fixed(fields, 2, "a numpy scalar")
    numpy = _numpy()
    kind = _dtype(numpy, dtype)
    if not isinstance(data, bytes) or len(data) != kind.itemsize:
        raise Untrusted(f"a numpy scalar of dtype {kind} with the wrong number of bytes")
    return numpy.frombuffer(data, kind)[0]


def _numpy() -> Any:
    import numpy

    return numpy


def _torch_tensor(fields: Any) -> Any:
    dtype, shape, data = _fixed(fields, 3, "a tensor")
    if dtype not in TENSOR_DTYPES:
        raise Untrusted(f"a tensor of dtype {dtype!r}")
    import torch

    kind = getattr(torch, dtype)
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise Untrusted(f"a tensor's shape: {shape!r}")
    size = torch.empty((), dtype=kind).element_size()
    if not isinstance(data, bytes) or len(data) != math.prod(shape) * size:
        raise Untrusted(f"a tensor of shape {shape} and dtype {dtype} with the wrong number of bytes")
    if not data:
        return torch.empty(shape, dtype=kind)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(kind).reshape(shape)


def _dtype(numpy: Any, text: Any) -> Any:
    if not isinstance(text, str) or not _DTYPE.fullmatch(text):
        raise Untrusted(f"an array of dtype {text!r}: plain numbers, bytes and str only")
    kind = numpy.dtype(text)
    if kind.hasobject or kind.fields is not None or kind.subdtype is not None:
        raise Untrusted(f"an array of dtype {text!r}")
    return kind


def _structseq(fields: Any) -> Any:
    items = _of(fields, list, "an os result record")
    if len(items) != 3 or items[0] not in _STRUCTSEQS:
        raise Untrusted(f"an os result record: {items[:1]!r}")
    fields = tuple(_of(items[1], list, "its fields"))
    return _STRUCTSEQS[items[0]](fields, _of(items[2], dict, "its extra fields"))


def _path(fields: Any) -> pathlib.PurePath:
    name, text = _fixed(fields, 2, "a path")
    if name not in _PATHS:
        raise Untrusted(f"a path of class {name!r}")
    return _PATHS[name](_of(text, str, "a path's text"))


def _named(hook: _Hook, module: Any, name: Any, what: str) -> Any:
    """The class or function a message names: a standard exception class, or (records) what
    register() named."""
    if not isinstance(module, str) or not isinstance(name, str):
        raise Untrusted(f"{what} named by {module!r}.{name!r}")
    found = _BUILDERS.get((module, name)) if hook.records else None
    if found is None and module in EXCEPTION_MODULES and "." not in name and name.isidentifier():
        imported = sys.modules.get(module) or importlib.import_module(module)
        candidate = getattr(imported, name, None)
        found = candidate if isinstance(candidate, type) and _standard_exception(candidate) else None
    if found is None:
        raise Untrusted(f"{module}.{name}")
    return found


def _exception_rule(hook: _Hook, fields: Any) -> BaseException:
    module, name, args, state = _fixed(fields, 4, "an exception")
    cls = _named(hook, module, name, "an exception")
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        raise Untrusted(f"{module}.{name} is not an exception class")
    error = cls(*_of(args, list, "an exception's arguments"))
    error.__dict__.update({str(k): v for k, v in _of(state, dict, "an exception's attributes").items()})
    return error


def _rank_exception(fields: Any) -> BaseException:
    module, qualname, bases, text, args, attributes = _fixed(fields, 6, "a rank's exception")
    for name in (module, qualname):
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise Untrusted(f"a rank's exception named by {name!r}")
    bases = _of(bases, list, "a rank's exception's bases")
    if len(bases) > MAX_BASES or not all(isinstance(b, str) and rankerrors.builtin_exception(b) for b in bases):
        raise Untrusted(f"a rank's exception with bases {bases!r}")
    attributes = _of(attributes, dict, "a rank's exception's attributes")
    return rankerrors.rebuild(module, qualname, bases, _of(text, str, "a rank's exception's text"),
                              _of(args, list, "a rank's exception's arguments"), attributes)


def _record(hook: _Hook, fields: Any) -> Any:
    module, name, values = _fixed(fields, 3, "a record")
    cls = _named(hook, module, name, "a record")
    values = _of(values, list, "a record's fields")
    if not isinstance(cls, type) or issubclass(cls, BaseException):
        raise Untrusted(f"{module}.{name} is not a record")
    if issubclass(cls, msgspec.Struct):
        struct_fields = cls.__struct_fields__
        if len(values) != len(struct_fields):
            raise Untrusted(f"{module}.{name} with {len(values)} fields, not {len(struct_fields)}")
        return cls(**dict(zip(struct_fields, values)))
    if issubclass(cls, tuple):
        return cls._make(values)  # type: ignore[attr-defined]  # a named tuple (register() checks nothing else)
    names = [f.name for f in dataclasses.fields(cast(Any, cls))]
    if len(values) != len(names):
        raise Untrusted(f"{module}.{name} with {len(values)} fields, not {len(names)}")
    record = cls.__new__(cls)
    for field_name, value in zip(names, values):
        object.__setattr__(record, field_name, value)
    return record


def _object(hook: _Hook, fields: Any) -> Any:
    module, name = _fixed(fields, 2, "a class or function")
    return _named(hook, module, name, "a class or function")


def _call(hook: _Hook, fields: Any) -> Any:
    module, name, args = _fixed(fields, 3, "a built value")
    builder = _named(hook, module, name, "a builder")
    if isinstance(builder, type):
        raise Untrusted(f"{module}.{name} is a class, not a builder")
    return builder(*_of(args, list, "a builder's arguments"))


_RULES: dict[int, Callable[[_Hook, Any], Any]] = {
    TUPLE: lambda h, f: tuple(_of(f, list, "a tuple")),
    DICT: lambda h, f: dict(_pairs(f, "a dict")),
    SET: lambda h, f: set(_of(f, list, "a set")),
    FROZENSET: lambda h, f: frozenset(_of(f, list, "a frozenset")),
    BIGINT: lambda h, f: _number(f, _bigint, "a big int"),
    BYTEARRAY: lambda h, f: bytearray(_of(f, bytes, "a bytearray")),
    COMPLEX: lambda h, f: complex(*(_of(part, (int, float), "a complex number") for part in _fixed(f, 2, "complex"))),
    NDARRAY: lambda h, f: _array(f),
    NPSCALAR: lambda h, f: _scalar(f),
    TENSOR: lambda h, f: _torch_tensor(f),
    SURROGATES: lambda h, f: _of(f, bytes, "a text").decode("utf-8", "surrogatepass"),
    DATE: lambda h, f: datetime.date(*_fixed(f, 3, "a date")),
    DATETIME: lambda h, f: _datetime(f),
    TIME: lambda h, f: _time(f),
    TIMEDELTA: lambda h, f: datetime.timedelta(*_fixed(f, 3, "a timedelta")),
    TIMEZONE: lambda h, f: datetime.timezone(datetime.timedelta(seconds=_fixed(f, 2, "a time zone")[0]), f[1]),
    DECIMAL: lambda h, f: _number(f, decimal.Decimal, "a Decimal"),
    FRACTION: lambda h, f: fractions.Fraction(*(_of(n, int, "a fraction's part") for n in _fixed(f, 2, "a fraction"))),
    PATH: lambda h, f: _path(f),
    UUID: lambda h, f: uuid.UUID(bytes=_of(f, bytes, "a UUID")),
    STRUCTSEQ: lambda h, f: _structseq(f),
    RANGE: lambda h, f: range(*(_of(n, int, "a range's bound") for n in _fixed(f, 3, "a range"))),
    SLICE: lambda h, f: slice(*_fixed(f, 3, "a slice")),
    DEQUE: lambda h, f: collections.deque(_of(_fixed(f, 2, "a deque")[0], list, "a deque's items"),
                                          _of(f[1], (int, type(None)), "a deque's length")),
    ORDEREDDICT: lambda h, f: collections.OrderedDict(_pairs(f, "an ordered dict")),
    EXCEPTION: _exception_rule,
    RANK_EXCEPTION: lambda h, f: _rank_exception(f),
    RECORD: _record,
    CALL: _call,
    OBJECT: lambda h, f: _object(h, f),
}
_PLAIN_HOOK, _WITH_RECORDS_HOOK = _Hook(records=False), _Hook(records=True)
_PLAIN = msgspec.msgpack.Decoder(ext_hook=_PLAIN_HOOK)
_WITH_RECORDS = msgspec.msgpack.Decoder(ext_hook=_WITH_RECORDS_HOOK)

register(Foreign)
