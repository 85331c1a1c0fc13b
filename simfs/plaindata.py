"""What a process that ran rank code sends the host: pickles the host loads with an unpickler that
builds plain data (containers, numbers, text, bytes, numpy arrays, standard exceptions and
simfs's) and the records simfs and scenarios register here (results, traces, findings), so
nothing a rank made or forged can run code in the host (pickle's documentation, "Restricting
Globals"). The sending side, ``dumps``, first stands in for what the host would refuse: an
exception of another class becomes a simfs.RankError naming it, any other object a Foreign
naming its type, with its repr."""

from __future__ import annotations

import io
import pickle
import types
from collections.abc import Callable
from typing import Any

from .errors import RankError

# classes a message may name, by module: plain data only (their construction runs no code the
# sender chose)
PLAIN: dict[str, frozenset[str]] = {
    "builtins": frozenset({"complex", "bytearray", "frozenset", "set", "range", "slice", "object"}),
    "collections": frozenset({"OrderedDict", "deque"}),
    "copyreg": frozenset({"_reconstructor"}),
    "datetime": frozenset({"date", "datetime", "time", "timedelta", "timezone"}),
    "decimal": frozenset({"Decimal"}),
    "fractions": frozenset({"Fraction"}),
    "pathlib": frozenset({"PurePath", "PurePosixPath", "PosixPath", "Path"}),
    "os": frozenset({"stat_result", "statvfs_result", "times_result", "uname_result"}),
    "uuid": frozenset({"UUID", "SafeUUID"}),
    "numpy": frozenset({"ndarray", "dtype"}),
    "numpy.core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy._core.multiarray": frozenset({"_reconstruct", "scalar"}),
    "numpy.dtypes": frozenset({"Float64DType", "Float32DType", "Float16DType", "Int64DType", "Int32DType",
                               "Int16DType", "Int8DType", "UInt8DType", "UInt16DType", "UInt32DType",
                               "UInt64DType", "BoolDType", "Complex64DType", "Complex128DType", "BytesDType",
                               "StrDType"}),
}
# their exception classes only: the standard library's that file and process code raises (importing
# these modules runs nothing of note), simfs's, torch.distributed's and filelock's
EXCEPTION_MODULES = frozenset({
    "builtins", "shutil", "subprocess", "socket", "queue", "concurrent.futures._base", "json.decoder", "pickle",
    "_pickle", "zipfile", "tarfile", "zlib", "struct", "_struct", "csv", "_csv", "configparser", "tomllib",
    "simfs.errors", "torch.distributed", "filelock._error",
})
_RECORDS: set[tuple[str, str]] = set()  # (module, qualified name) of what register() named
# what pickle writes inline, never through a class it names
_INLINE = (type(None), bool, int, float, str, bytes, list, tuple, dict)


class Untrusted(pickle.UnpicklingError):
    """A message names something the host does not load."""


class Foreign:
    """Stands, in the host, for a value of a class it does not load (rank code never runs in the
    host): the value's type and its repr, as the process that made it wrote them."""

    def __init__(self, type_name: str, text: str) -> None:
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return f"<{self.type_name} (not loaded in the host): {self.text}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Foreign) and (self.type_name, self.text) == (other.type_name, other.text)

    def __hash__(self) -> int:
        return hash((self.type_name, self.text))

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (self.type_name, self.text)


def register(*objects: type | Callable[..., Any]) -> None:
    """Let the host load ``objects`` (simfs's and scenarios' own records and their rebuilders)
    from a confined child's message. Register only what builds an object by storing fields:
    the sender chooses the arguments."""
    for obj in objects:
        _RECORDS.add((obj.__module__, obj.__qualname__))


def loadable(cls: type) -> bool:
    """The host loads instances of ``cls`` from a confined child's message."""
    return cls in _INLINE or _loadable(cls.__module__, cls.__qualname__, cls)


def _loadable(module: str, name: str, obj: Any, records: bool = True) -> bool:
    if name in PLAIN.get(module, ()) or (records and (module, name) in _RECORDS):
        return True
    return module in EXCEPTION_MODULES and isinstance(obj, type) and issubclass(obj, BaseException)


class _PlainUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, records: bool) -> None:
        super().__init__(io.BytesIO(data))
        self._records = records

    def find_class(self, module: str, name: str) -> Any:
        if module in EXCEPTION_MODULES or _loadable(module, name, None, self._records):
            found = super().find_class(module, name)  # (an exception module's: checked once found)
            if _loadable(module, name, found, self._records):
                return found
        raise Untrusted(f"{module}.{name}")


def load(data: bytes, *, records: bool = False) -> Any:
    """A message as plain data (and, with ``records``, the registered records); raises Untrusted
    naming a class it may not hold."""
    return _PlainUnpickler(data, records).load()


class _StandInPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            module, name = getattr(obj, "__module__", None) or "", getattr(obj, "__qualname__", "")
            if _loadable(module, name, obj):
                return NotImplemented
            return Foreign, (f"{module}.{name}", "a class or function")
        cls = type(obj)
        if loadable(cls):
            return NotImplemented
        type_name = f"{cls.__module__}.{cls.__qualname__}"
        if isinstance(obj, BaseException):
            return RankError, (type_name, _text(str, obj))
        return Foreign, (type_name, _text(repr, obj)[:2000])


def _text(show: Callable[[Any], str], obj: Any) -> str:
    try:
        return show(obj)
    except Exception as exc:  # noqa: BLE001 - the value's own repr failed: say so instead
        return f"(its {show.__name__} raised {type(exc).__name__})"


def dumps(value: Any) -> bytes:
    """``value`` pickled so that ``load(..., records=True)`` builds it in the host: what the host
    would refuse is replaced by its stand-in (RankError, Foreign). Raises Untrusted if something
    is still refused (a registered class that pickles through a function it does not name)."""
    out = io.BytesIO()
    _StandInPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    data = out.getvalue()
    load(data, records=True)  # the host's own check, here first: it builds nothing the sender chose
    return data


register(Foreign, RankError)
