"""The import system inside a rank: while a rank's thread finds or loads a module, its task counts
it, so that tasks/importreads.py looks at the stack only then (every other call of a rank pays a
counter check, not a stack walk). A rank process may also ask to be told when a module's import
finished (``after_import``: rank/libsetup.py seeds torch's generator then)."""

from __future__ import annotations

import functools
import importlib._bootstrap as _bootstrap
import sys
from collections.abc import Callable
from typing import Any

from ...tasks.task import current_task
from .registry import patch

_after: dict[str, Callable[[], None]] = {}  # module name -> what runs once its import finished, here


def after_import(name: str, then: Callable[[], None]) -> None:
    """Call ``then()`` once module ``name``'s import finishes in this process (its first import
    that succeeds), before that import returns to the importer."""
    _after[name] = then


def _counted(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        task = current_task()
        if task is None:
            return fn(*args, **kwargs)
        task.importing += 1
        try:
            found = fn(*args, **kwargs)
        finally:
            task.importing -= 1
        if _after and args and args[0] in _after and args[0] in sys.modules:  # its import finished
            _after.pop(args[0])()
        return found

    counted.__simfs_imports__ = True  # type: ignore[attr-defined]
    return counted


def install() -> None:
    # _find_and_load: every import of a module not yet in sys.modules (the import statement,
    # importlib.import_module); _find_spec: importlib.util.find_spec and importlib.reload
    for name in ("_find_and_load", "_find_spec"):
        if not getattr(getattr(_bootstrap, name), "__simfs_imports__", False):
            patch(_bootstrap, name, _counted(getattr(_bootstrap, name)))
