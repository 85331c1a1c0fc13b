"""Warnings a rank shows: what Python's ``warnings`` would write to the rank's stderr (its
filters and once-per-location registry applied, as in any process) is kept with the rank's output
as a warning (category, message, file, line), counted, instead of as two lines of text
(simfs/capture.py). A warning shown to a file of the rank's own, a stderr the rank replaced, a
``warnings.showwarning`` it set, or ``catch_warnings(record=True)`` behave as in a real process.

The patch is on ``warnings._showwarnmsg``, which ``warnings`` calls for every showing and nothing
reassigns; ``catch_warnings`` reassigns ``_showwarnmsg_impl`` and ``showwarning``, and a patch there
would be put back over the host's own (pytest's recorder, for one) at every run. A rank starts
with a new process's two (tasks/showing.py: a rank process sets them as it starts, greenlet ranks
have them as their own values, runtime/procglobals.py); what differs from them, the rank set."""

from __future__ import annotations

import sys
import warnings

from ...tasks.showing import first_showwarning, showwarnmsg_impl
from ...tasks.task import Task
from .registry import patch_function
from .stdlib import console_fd


def _category(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _show(task: Task, msg: warnings.WarningMessage) -> None:
    hook = warnings.showwarning
    if hook is not first_showwarning():
        hook(msg.message, msg.category, msg.filename, msg.lineno, msg.file, msg.line)  # the rank's own hook
        return
    impl = warnings._showwarnmsg_impl  # type: ignore[attr-defined]
    if impl is not showwarnmsg_impl:
        impl(msg)  # the rank's own catch_warnings(record=True)
        return
    if msg.file is not None or console_fd(sys.stderr) != 2:  # (not a stream the rank put in its place)
        showwarnmsg_impl(msg)
        return
    task.context.sys.machine.warned(task.rank, _category(msg.category), str(msg.message), str(msg.filename),
                                    int(msg.lineno))


def install() -> None:
    patch_function(warnings, "_showwarnmsg", _show, scan=False)
