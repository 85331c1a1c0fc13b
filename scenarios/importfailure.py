"""Why a user's job could not be imported, told as bad input (the ``simfs`` command exits 2): the
error and the file and line of the user's code it came from, not the import system's frames or
simfs's own."""

from __future__ import annotations

import os
import traceback

from .importpath import OWN_PACKAGES, own_location


def cannot_import(spec: str, exc: BaseException) -> ValueError:
    """The ValueError for job ``spec`` ('module:function' or 'file.py:function') whose module
    raised ``exc`` while it was imported."""
    where, told, source = _syntax(exc) if isinstance(exc, SyntaxError) else _raised(exc)
    head = f"cannot import the job {spec!r}: " + (f"{where}: " if where else "") + told
    return ValueError("\n".join([head, *(f"    {line}" for line in source)]))


def _syntax(exc: SyntaxError) -> tuple[str, str, list[str]]:
    """Where a module that does not compile is wrong: its own file and line, the line and a caret
    (its traceback holds only the import system's frames)."""
    raw = (exc.text or "").rstrip("\n")
    line = raw.strip()
    source = [line] if line else []
    if line and exc.offset:
        source.append(" " * max(exc.offset - 1 - (len(raw) - len(raw.lstrip())), 0) + "^")
    return f"{_shown(exc.filename or '?')}:{exc.lineno}", f"{type(exc).__name__}: {exc.msg}", source


def _raised(exc: BaseException) -> tuple[str, str, list[str]]:
    """Where a module raised while it ran: the innermost line of the user's code, and that line."""
    frame = _innermost_user_frame(exc)
    told = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    if frame is None:
        return "", told, []
    return f"{_shown(frame.filename)}:{frame.lineno}", told, [(frame.line or "").strip()] if frame.line else []


def _innermost_user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the exception's traceback in the user's code: not the import
    system's (frozen importlib) and not simfs's packages'."""
    simfs_code = tuple(own_location(name) + os.sep for name in OWN_PACKAGES)
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not frame.filename.startswith("<") and not os.path.abspath(frame.filename).startswith(simfs_code)]
    return frames[-1] if frames else None


def _shown(path: str) -> str:
    """A path relative to the current directory when it lies beneath it."""
    absolute, here = os.path.abspath(path), os.getcwd()
    return os.path.relpath(absolute, here) if absolute.startswith(here + os.sep) else path
