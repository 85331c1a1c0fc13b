"""Warnings a rank shows: what Python's ``warnings`` would write to the rank's stderr (its
filters and once-per-location registry applied, as in any process) is kept with the rank's output
as a warning (category, message, file, line), counted, instead of as two lines of text
(simfs/capture.py). A warning shown to a file of the rank's own, a stderr the rank replaced, a
``warnings.showwarning`` it set, or ``catch_warnings(record=True)`` behave as in a real process."""

from __future__ import annotations

import sys
import warnings
from typing import Any

from ...tasks.task import Task
from .registry import original, patch_function


def _category(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _on_console(stream: Any) -> bool:
    """``stream`` writes the rank's descriptor 2 (not a stream the rank put in its place)."""
    try:
        return bool(stream.fileno() == 2)
    except (AttributeError, OSError, ValueError):
        return False


def _show(task: Task, msg: warnings.WarningMessage) -> None:
    if msg.file is not None or not _on_console(sys.stderr):
        original(warnings, "_showwarnmsg_impl")(msg)
        return
    task.context.sys.machine.warned(task.rank, _category(msg.category), str(msg.message), str(msg.filename),
                                    int(msg.lineno))


def install() -> None:
    patch_function(warnings, "_showwarnmsg_impl", _show, scan=False)
