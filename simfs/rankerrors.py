"""A rank's exception of a class the host does not load (one of the job's own: rank code never runs
in the host), rebuilt in the host as a class that keeps what callers test for: its builtin bases
(``except TimeoutError`` and ``isinstance(e, OSError)`` hold, with errno, strerror and filename),
its module and qualified name (as a traceback shows them), its arguments and its text. Every such
class is also a simfs.RankError, made once per name and bases: two errors of one class share it."""

from __future__ import annotations

import builtins
import contextlib
from typing import Any

from .errors import RankError

_OSERROR_FIELDS = ("errno", "strerror", "filename", "filename2")
_CLASSES: dict[tuple[str, str, tuple[type[BaseException], ...]], type[RankError]] = {}
MAX_CLASSES = 4096  # classes kept for reuse; past that each error gets a class of its own


def builtin_bases(cls: type[BaseException]) -> list[str]:
    """The most specific builtin exception classes ``cls`` derives from (WaitTimeout: TimeoutError)."""
    found = [base for base in cls.__mro__ if base.__module__ == "builtins" and issubclass(base, BaseException)]
    specific = [base for base in found if not any(other is not base and issubclass(other, base) for other in found)]
    return [base.__name__ for base in specific if base not in (BaseException, Exception)]


def oserror_fields(exc: BaseException) -> dict[str, Any]:
    """What an OSError carries besides its arguments (empty for other exceptions)."""
    if not isinstance(exc, OSError):
        return {}
    return {name: getattr(exc, name) for name in _OSERROR_FIELDS}


def builtin_exception(name: str) -> type[BaseException] | None:
    """The builtin exception class called ``name`` (None: there is none)."""
    found = getattr(builtins, name, None) if name.isidentifier() else None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def rebuild(module: str, qualname: str, bases: list[str], text: str, args: list[Any],
            fields: dict[str, Any]) -> RankError:
    """The rank's exception as the host shows it (``fields``: an OSError's errno, strerror and
    filenames). A base that is not a builtin exception class is left out."""
    known = tuple(dict.fromkeys(b for b in map(builtin_exception, bases) if b is not None))
    cls = _class(module, qualname, known)
    error: Any = cls.__new__(cls, *args)  # a RankError (with simfs_text, what its __str__ shows)
    error.args = tuple(args)
    error.type_name, error.simfs_text = f"{module}.{qualname}", text
    with contextlib.suppress(AttributeError):  # a builtin base's own, read-only (ExceptionGroup's) stays
        error.message = text
    if isinstance(error, OSError):
        for name in _OSERROR_FIELDS:
            setattr(error, name, fields.get(name))
    rebuilt: RankError = error
    return rebuilt


def _class(module: str, qualname: str, bases: tuple[type[BaseException], ...]) -> type[RankError]:
    key = (module, qualname, bases)
    cls = _CLASSES.get(key)
    if cls is None:
        cls = _derive(module, qualname, bases)
        if len(_CLASSES) < MAX_CLASSES:
            _CLASSES[key] = cls
    return cls


def _derive(module: str, qualname: str, bases: tuple[type[BaseException], ...]) -> type[RankError]:
    """A RankError class with ``bases`` (those whose layouts cannot combine dropped, last first).
    The builtin bases come first: the class's instances are then made by their __new__ (MemoryError's
    refuses a class whose first base is another exception's)."""
    namespace = {"__module__": module, "__qualname__": qualname, "__str__": _text, "__reduce__": _reduce,
                 "__init__": _no_init, "simfs_rebuilt": True}
    name = qualname.rpartition(".")[2]
    for keep in range(len(bases), 0, -1):
        try:
            return type(name, (*bases[:keep], RankError), namespace)
        except TypeError:  # e.g. OSError with UnicodeDecodeError: two C layouts
            continue
    return type(name, (RankError,), namespace)


def _no_init(self: RankError, *args: Any) -> None:
    """Built by rebuild(), which sets what RankError's __init__ would."""


def _text(self: Any) -> str:
    text: str = self.simfs_text
    return text


def _reduce(self: RankError) -> tuple[Any, tuple[Any, ...]]:
    return rebuild, described(self, str(self))


def described(error: BaseException, text: str) -> tuple[str, str, list[str], str, list[Any], dict[str, Any]]:
    """What rebuild() takes to make ``error`` (shown as ``text``) again: a rank's exception of any
    class, or a rebuilt one."""
    cls = type(error)
    return cls.__module__, cls.__qualname__, builtin_bases(cls), text, list(error.args), oserror_fields(error)
