"""Warnings a rank shows: what Python's ``warnings`` would write to the rank's stderr (its
filters and once-per-location registry applied, as in any process) is kept with the rank's output
as a warning (category, message, file, line), counted, instead of as two lines of text
(simfs/capture.py). A warning shown to a file of the rank's own, a stderr the rank replaced, a
``warnings.showwarning`` it set, or ``catch_warnings(record=True)`` behave as in a real process.

The patch is on ``warnings._showwarnmsg``, which ``warnings`` calls for every showing and nothing
reassigns; ``catch_warnings`` reassigns ``_showwarnmsg_impl`` and ``showwarning``, and a patch there
would be put back over the host's own (pytest's recorder, for one) at every run. What the host had
in those two when the run started is its own, which a rank (a process that never entered the
host's ``with`` block) does not use; what differs from it, the rank set."""

from __future__ import annotations

import sys
import warnings
from typing import Any

from ...tasks.task import Task
from .registry import patch_function


def _category(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _on_console(stream: Any) -> bool:
    """``stream`` writes the rank's descriptor 2 (not a stream the rank put in its place)."""
    try:
        return bool(stream.fileno() == 2)
    except (AttributeError, OSError, ValueError):
        return False


def _write(msg: warnings.WarningMessage) -> None:
    """CPython's own showing (warnings.py ``_showwarnmsg_impl``), not whatever the host had put in
    its place."""
    file = msg.file if msg.file is not None else sys.stderr
    if file is None:
        return  # sys.stderr is None (pythonw): warnings are lost
    text = warnings._formatwarnmsg(msg)  # type: ignore[attr-defined]
    try:
        file.write(text)
    except OSError:
        pass  # the file is invalid: the warning is lost, as in CPython


_host: list[Any] = [None, None]  # warnings.showwarning and _showwarnmsg_impl as the host had them


def remember_host() -> None:
    """Note the host's showing hooks (at each run's start, before any rank runs)."""
    _host[:] = [warnings.showwarning, warnings._showwarnmsg_impl]  # type: ignore[attr-defined]


def forget_host() -> None:
    """Drop them as the run ends: a hook the host drops later (pytest's recorder of one test) is
    then not freed at the next run, inside it (where the host's frozen objects must stay)."""
    _host[:] = [None, None]


def _show(task: Task, msg: warnings.WarningMessage) -> None:
    hook = warnings.showwarning
    if hook is not _host[0] and hook is not warnings._showwarning_orig:  # type: ignore[attr-defined]
        hook(msg.message, msg.category, msg.filename, msg.lineno, msg.file, msg.line)  # the rank's own hook
        return
    impl = warnings._showwarnmsg_impl  # type: ignore[attr-defined]
    if impl is not _host[1]:
        impl(msg)  # the rank's own catch_warnings(record=True)
        return
    if msg.file is not None or not _on_console(sys.stderr):
        _write(msg)
        return
    task.context.sys.machine.warned(task.rank, _category(msg.category), str(msg.message), str(msg.filename),
                                    int(msg.lineno))


def install() -> None:
    patch_function(warnings, "_showwarnmsg", _show, scan=False)
