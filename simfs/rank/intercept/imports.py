"""The import system inside a rank: while a rank's thread finds or loads a module, its task counts
it, so that tasks/importreads.py looks at the stack only then (every other call of a rank pays a
counter check, not a stack walk)."""

from __future__ import annotations

import functools
import importlib._bootstrap as _bootstrap
from collections.abc import Callable
from typing import Any

from ...tasks.task import current_task
from .registry import patch


def _counted(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        task = current_task()
        if task is None:
            return fn(*args, **kwargs)
        task.importing += 1
        try:
            return fn(*args, **kwargs)
        finally:
            task.importing -= 1

    counted.__simfs_imports__ = True  # type: ignore[attr-defined]
    return counted


def install() -> None:
    # _find_and_load: every import of a module not yet in sys.modules (the import statement,
    # importlib.import_module); _find_spec: importlib.util.find_spec and importlib.reload
    for name in ("_find_and_load", "_find_spec"):
        if not getattr(getattr(_bootstrap, name), "__simfs_imports__", False):
            patch(_bootstrap, name, _counted(getattr(_bootstrap, name)))
