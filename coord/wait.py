"""Waiting for a condition on a shared filesystem: exponential backoff with jitter, a clear
timeout, and (for paths) revalidation of the stale caches network filesystems keep."""

from __future__ import annotations

import logging
import os
import random
import stat
import time
from collections.abc import Callable

from .errors import WaitTimeout

log = logging.getLogger("coord")

NFS_HINT = ("On NFS and similar mounts this usually means a client cache: a 'not found' cached for the "
            "parent directory lasts until the directory's attribute cache expires (acdirmin/acdirmax, up to "
            "60 s by default; lookupcache=all). Listing the parent directory revalidates it, a barrier after "
            "the creation orders the waiters, and a longer timeout absorbs the lag.")


def _jitter_source() -> random.Random:
    """Jitter that differs between processes even when every rank seeded ``random`` alike."""
    return random.Random(int.from_bytes(os.urandom(8), "big"))


def wait_for(predicate: Callable[[], object], *, timeout: float, what: str, interval: float = 0.05,
             max_interval: float = 2.0, hint: str = NFS_HINT) -> object:
    """Call ``predicate`` until it returns something truthy (which is returned), sleeping with
    exponential backoff and jitter between tries; raise WaitTimeout after ``timeout`` seconds,
    measured from this call."""
    if timeout < 0 or interval <= 0 or max_interval < interval:
        raise ValueError(f"wait_for({what!r}): need timeout >= 0 and 0 < interval <= max_interval, got "
                         f"timeout={timeout}, interval={interval}, max_interval={max_interval}")
    start = time.monotonic()
    deadline = start + timeout
    rng = _jitter_source()
    delay = interval
    tries = 0
    while True:
        tries += 1
        value = predicate()
        if value:
            if tries > 1:
                log.debug("waited %.3fs (%d tries) for %s", time.monotonic() - start, tries, what)
            return value
        now = time.monotonic()
        if now >= deadline:
            raise WaitTimeout(what, now - start, tries, hint)
        time.sleep(min(delay * (0.5 + rng.random()), max(deadline - now, 0.0)))
        delay = min(delay * 2, max_interval)


def revalidate(path: str) -> None:
    """Make this client ask the server again about ``path``: listing each ancestor directory
    drops cached 'not found' entries (what ``ls parent`` does for an NFS user)."""
    path = os.path.abspath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts)):
        ancestor = os.sep.join(parts[:i]) or os.sep
        try:
            os.listdir(ancestor)
        except OSError:
            return  # an ancestor is not there (yet): deeper ones cannot be either


def _exists_fresh(path: str, is_dir: bool | None) -> bool:
    """Does ``path`` exist (as a directory / not one, if asked)? A 'not found' is asked
    again after revalidating the ancestors."""
    for attempt in range(2):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if attempt == 0:
                revalidate(path)
                continue
            return False
        return is_dir is None or stat.S_ISDIR(st.st_mode) == is_dir
    return False


def wait_visible(path: str | os.PathLike[str], *, timeout: float, what: str | None = None,
                 is_dir: bool | None = None, interval: float = 0.05, max_interval: float = 2.0) -> None:
    """Wait until ``path`` exists as this process sees it, revalidating the caches between
    tries. ``is_dir`` (True/False) also requires it to be a directory / not one."""
    target = os.fspath(path)
    wait_for(lambda: _exists_fresh(target, is_dir), timeout=timeout, interval=interval, max_interval=max_interval,
             what=what or f"{target} to become visible")
