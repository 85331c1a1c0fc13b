"""A cross-node lock that does not trust flock (a no-op or node-local on some Lustre, GPFS and
NFS mounts). It relies only on atomic exclusive creation of a file.

The lock is a sequence of generation files ``<path>.<N>``, each holding its owner and lease
expiry. Whoever sees the newest generation released or expired may take the lock by creating
generation N+1 with O_EXCL: exactly one process can, so takeover is race-free. A taker then
checks that N+1 really is the newest generation and that N still exists (a contender that
stalled long enough for N+1 to be taken, released and cleaned up would otherwise re-create
it); generation 0 is never removed, so it cannot be re-created. The holder renews its lease
in the background and checks that no successor exists; a holder that was too slow to renew
finds the successor and raises LockLost instead of carrying on."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, cast

from .atomic import atomic_write, unique_suffix
from .errors import LockLost, LockTimeout
from .wait import _jitter_source

if TYPE_CHECKING:
    from types import EllipsisType

log = logging.getLogger("coord")

_DIGITS = 12


class FileLock:
    """``with FileLock("/shared/job/lock", timeout=60, lease=30): ...``

    ``timeout``: seconds to wait in :meth:`acquire` (None waits forever). ``lease``: seconds
    a holder may go silent before others may take the lock; it is renewed every lease/3 while
    held. Clocks of the nodes must agree to well within the lease.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float | None = 60.0, lease: float = 60.0,
                 poll: float = 0.05, renew: bool = True) -> None:
        if lease <= 0 or poll <= 0 or (timeout is not None and timeout < 0):
            raise ValueError(f"FileLock: need lease > 0, poll > 0, timeout >= 0 or None; got lease={lease}, "
                             f"poll={poll}, timeout={timeout}")
        self.path = os.path.abspath(os.fspath(path))
        self.directory, self._prefix = os.path.split(self.path)
        self._prefix += "."
        self.timeout, self.lease, self.poll, self.auto_renew = timeout, lease, poll, renew
        self._gen: int | None = None
        self._token = ""
        self._expires = 0.0
        self._lost: str | None = None
        self._unreadable: dict[int, float] = {}  # generation -> when this object first saw it unreadable
        self._refused = ""
        self._stop: threading.Event | None = None
        self._renewer: threading.Thread | None = None

    # -- generations on disk --------------------------------------------------------------------
    def _name(self, gen: int) -> str:
        return os.path.join(self.directory, f"{self._prefix}{gen:0{_DIGITS}d}")

    def _generations(self) -> list[int]:
        gens = []
        for name in os.listdir(self.directory):
            tail = name[len(self._prefix):]
            if name.startswith(self._prefix) and len(tail) == _DIGITS and tail.isdigit():
                gens.append(int(tail))
        return sorted(gens)

    def _read(self, gen: int) -> dict[str, Any] | None:
        """A generation's record; None if it is being written (or was left empty by a crash).
        A read racing a renewal (which replaces the file) is retried."""
        for attempt in range(3):
            try:
                with open(self._name(gen), encoding="utf-8") as f:
                    record: dict[str, Any] | None = json.loads(f.read())
                    return record
            except FileNotFoundError:
                return None
            except (OSError, ValueError):
                time.sleep(self.poll * (attempt + 1))
        return None

    def _is_free(self, gen: int) -> tuple[bool, str]:
        record = self._read(gen)
        now = time.time()
        if record is None:
            if not os.path.exists(self._name(gen)):
                return False, "a generation file vanished (someone is cleaning up)"
            # judged on this process's own clock: mtimes are coarse and clocks may differ
            first = self._unreadable.setdefault(gen, time.monotonic())
            waited = time.monotonic() - first
            return waited > self.lease, f"generation {gen} has been unreadable for {waited:.1f}s"
        if record.get("released"):
            return True, "released"
        expires = float(record.get("expires", 0))
        holder = f"{record.get('host', '?')} pid {record.get('pid', '?')}"
        if expires < now:
            return True, f"lease of {holder} expired {now - expires:.1f}s ago"
        return False, f"held by {holder} for {expires - now:.1f}s more"

    def _record(self, released: bool = False) -> dict[str, Any]:
        return {"token": self._token, "host": os.uname().nodename, "pid": os.getpid(),
                "expires": self._expires, "released": released}

    def _write_record(self, gen: int, released: bool = False) -> None:
        with atomic_write(self._name(gen), "w", encoding="utf-8") as f:
            f.write(json.dumps(self._record(released)))

    def _try_take(self, gen: int) -> bool:
        """Create generation ``gen`` exclusively and keep it only if it is the newest one and
        follows an existing predecessor."""
        name = self._name(gen)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except PermissionError:
            # sshfs reports a lost exclusive-create race as EPERM (and this client may not see the
            # winner's file yet); a real permission problem shows up as LockTimeout's reason
            self._refused = f"creating generation {gen} was refused (EPERM)"
            return False
        self._token = unique_suffix()
        self._expires = time.time() + self.lease
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(self._record()))
            f.flush()
            os.fsync(f.fileno())
        if self._superseded(gen) or (gen > 0 and not os.path.exists(self._name(gen - 1))):
            # a stale view: someone moved past this generation already, and its holder's cleanup
            # may have removed this file already (this process paused since it made it)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            return False
        return True

    def _superseded(self, gen: int) -> bool:
        """Does a generation newer than ``gen`` exist?"""
        return os.path.exists(self._name(gen + 1)) or any(g > gen for g in self._generations())

    # -- public ---------------------------------------------------------------------------------
    @property
    def held(self) -> bool:
        return self._gen is not None and self._lost is None

    def acquire(self, timeout: float | EllipsisType | None = ...) -> None:
        """Take the lock, waiting up to ``timeout`` seconds (default: the constructor's)."""
        if self._gen is not None:
            raise RuntimeError(f"FileLock({self.path!r}) is already held by this object")
        limit = self.timeout if timeout is ... else timeout
        start = time.monotonic()
        rng = _jitter_source()
        delay = self.poll
        known = -1  # the newest generation an exclusive create proved to exist (listings can lag)
        while True:
            gens = self._generations()
            newest: int | None
            newest = max(gens[-1] if gens else -1, known)
            newest = None if newest < 0 else newest
            free, why = (True, "never taken") if newest is None else self._is_free(newest)
            if free:
                candidate = 0 if newest is None else newest + 1
                if self._try_take(candidate):
                    self._gen, self._lost = candidate, None
                    self._unreadable.clear()
                    self._cleanup(gens)
                    self._start_renewer()
                    log.debug("locked %s (generation %d; previous: %s)", self.path, candidate, why)
                    return
                why = self._refused or f"generation {candidate} was taken by another process first"
                if not self._refused:
                    known = max(known, candidate)
                self._refused = ""
            waited = time.monotonic() - start
            if limit is not None and waited >= limit:
                raise LockTimeout(f"could not lock {self.path} within {limit:g}s: {why}")
            pause = delay * (0.5 + rng.random())
            if limit is not None:
                pause = min(pause, max(limit - waited, 0.0))
            time.sleep(pause)
            delay = min(delay * 2, max(self.poll, 1.0))

    def _cleanup(self, older: list[int]) -> None:
        """Remove older generations (but generation 0, which must never be re-created)."""
        for gen in older:
            if gen == 0:
                continue
            try:
                os.unlink(self._name(gen))
            except FileNotFoundError:
                pass

    def check(self) -> None:
        """Raise LockLost unless this object still holds the lock."""
        if self._gen is None:
            raise LockLost(f"FileLock({self.path!r}) is not held")
        if self._lost is None and self._superseded(self._gen):
            self._lost = "a newer generation was taken by another process"
        if self._lost is None and time.time() > self._expires:
            self._lost = f"the lease expired {time.time() - self._expires:.1f}s ago without renewal"
        if self._lost is not None:
            raise LockLost(f"lost the lock {self.path}: {self._lost}")

    def renew(self) -> None:
        """Extend the lease now (the background renewer calls this every lease/3)."""
        self.check()
        self._expires = time.time() + self.lease
        self._write_record(cast(int, self._gen))  # not None: check() passed
        if self._superseded(cast(int, self._gen)):
            self._lost = "a newer generation was taken while renewing"
            raise LockLost(f"lost the lock {self.path}: {self._lost}")

    def _start_renewer(self) -> None:
        if not self.auto_renew:
            return
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_loop, args=(self._stop,),
                                         name=f"FileLock-renew:{os.path.basename(self.path)}", daemon=True)
        self._renewer.start()

    def _renew_loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.lease / 3):
            try:
                self.renew()
            except (LockLost, OSError) as exc:
                self._lost = self._lost or str(exc)
                log.warning("FileLock %s: %s", self.path, exc)
                return

    def release(self) -> None:
        """Give the lock up. Raises LockLost if it had been lost (the caller's work was not
        protected for its whole duration)."""
        if self._gen is None:
            raise RuntimeError(f"FileLock({self.path!r}) is not held")
        if self._stop is not None:
            self._stop.set()
            cast(threading.Thread, self._renewer).join()  # set together with _stop
            self._stop = self._renewer = None
        gen, lost = self._gen, self._lost
        self._gen = None
        if lost is None and not self._superseded(gen):
            self._write_record(gen, released=True)
            return
        raise LockLost(f"lost the lock {self.path} before releasing it: {lost or 'a successor exists'}")

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = f"generation {self._gen}" if self._gen is not None else "not held"
        return f"<coord.FileLock {self.path} {state}>"
