"""How a new process shows a warning: CPython's own ``warnings.showwarning`` and
``warnings._showwarnmsg_impl``. A rank starts with these, as a process torchrun starts does, not
with the hooks of the host it came from (pytest's recorder of the test that runs the cluster, which
a rank process would inherit through the fork and greenlet ranks would share)."""

from __future__ import annotations

import sys
import warnings
from typing import Any


def showwarnmsg_impl(msg: warnings.WarningMessage) -> None:
    """CPython's ``warnings._showwarnmsg_impl`` (Lib/warnings.py): the text to the message's file,
    else to sys.stderr (none: the warning is lost), an OSError ignored."""
    file = msg.file if msg.file is not None else sys.stderr
    if file is None:
        return
    text = warnings._formatwarnmsg(msg)  # type: ignore[attr-defined]
    try:
        file.write(text)
    except OSError:
        pass


def first_showwarning() -> Any:
    """The ``warnings.showwarning`` a process starts with."""
    return warnings._showwarning_orig  # type: ignore[attr-defined]


def start_fresh() -> None:
    """Give this process (a rank process, just forked) a new process's warning hooks."""
    warnings.showwarning = first_showwarning()
    warnings._showwarnmsg_impl = showwarnmsg_impl  # type: ignore[attr-defined]
