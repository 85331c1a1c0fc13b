"""Real reads simfs makes on a rank's behalf: source lines for tracebacks and warnings
(linecache) come from the real disk, the same in every run, whoever asks."""

from __future__ import annotations

import functools
import linecache
from collections.abc import Callable
from typing import Any

from .registry import host_calls, patch


def _on_host(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with host_calls():
            return fn(*args, **kwargs)

    wrapper.__simfs_patched__ = True  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    for name in ("getlines", "updatecache", "checkcache", "lazycache"):
        if hasattr(linecache, name) and not getattr(getattr(linecache, name), "__simfs_patched__", False):
            patch(linecache, name, _on_host(getattr(linecache, name)), scan=False)
