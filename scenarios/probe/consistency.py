"""What one node sees of another's writes: close-to-open, rename atomicity for a concurrent
reader, a same-tick overwrite, a stale 'not found' after EEXIST, and a rename over a file the
reader holds open (ESTALE?)."""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from typing import IO

from .context import Context
from .report import Consistency, Stats
from .rounds import Experiment, Trial, run_round

V1, V2_LONG = b"version-1", b"version-2, longer"  # the new one longer: a cached size would cut it
BLOCK = 64 << 10  # a renamed-in version: large enough that a torn read would show


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


@dataclass
class _Experiment:
    """Defaults of the Experiment protocol: nothing to prepare, look at, or release."""

    delay: float | None = None
    details: dict[str, object] = field(default_factory=dict)

    def prepare(self, root: str) -> None:
        return None

    def look(self, root: str) -> None:
        return None

    def close(self) -> None:
        return None


@dataclass
class CloseToOpen(_Experiment):
    """The observer read the file; rank 0 rewrites it longer and closes; an open reads it whole?"""

    def prepare(self, root: str) -> None:
        _write(f"{root}/f", V1)

    def look(self, root: str) -> None:
        _read(f"{root}/f")

    def act(self, root: str) -> None:
        _write(f"{root}/f", V2_LONG)

    def check(self, root: str) -> bool:
        return _read(f"{root}/f") == V2_LONG


@dataclass
class SameTick(_Experiment):
    """As CloseToOpen with a same-size rewrite right after the first write: within one tick of a
    coarse server clock the mtime does not move, and a client that compares times keeps the old."""

    def prepare(self, root: str) -> None:
        _write(f"{root}/f", b"A" * 16)
        self.details["mtime_before"] = os.stat(f"{root}/f").st_mtime_ns

    def look(self, root: str) -> None:
        _read(f"{root}/f")

    def act(self, root: str) -> None:
        _write(f"{root}/f", b"B" * 16)
        self.details["same_tick"] = os.stat(f"{root}/f").st_mtime_ns == self.details["mtime_before"]

    def check(self, root: str) -> bool:
        return _read(f"{root}/f") == b"B" * 16


@dataclass
class Eexist(_Experiment):
    """The observer cached 'not found' for d and e; rank 0 made both. Its mkdir(d) fails: does
    isdir(d) still say False, and does makedirs(e, exist_ok=True) raise?"""

    def look(self, root: str) -> None:
        os.path.exists(f"{root}/d")
        os.path.exists(f"{root}/e")

    def act(self, root: str) -> None:
        os.mkdir(f"{root}/d")
        os.mkdir(f"{root}/e")

    def check(self, root: str) -> bool:
        try:
            os.mkdir(f"{root}/d")
            self.details["mkdir"] = "created"  # the server did not refuse: exclusive create is not checked
        except OSError as exc:
            self.details["mkdir"] = _errno_name(exc)
        self.details["stale"] = not os.path.isdir(f"{root}/d")
        try:
            os.makedirs(f"{root}/e", exist_ok=True)
            self.details["makedirs_raised"] = False
        except FileExistsError:
            self.details["makedirs_raised"] = True
        return True


@dataclass
class RenameOverOpen(_Experiment):
    """The observer holds the file open; rank 0 renames a new file over it; the held handle reads?"""

    handle: IO[bytes] | None = None

    def prepare(self, root: str) -> None:
        _write(f"{root}/f", V1)

    def look(self, root: str) -> None:
        self.handle = open(f"{root}/f", "rb")  # noqa: SIM115 - held across the round, closed in close()
        self.handle.read()

    def act(self, root: str) -> None:
        _write(f"{root}/tmp", V2_LONG)
        os.rename(f"{root}/tmp", f"{root}/f")

    def check(self, root: str) -> bool:
        assert self.handle is not None
        try:
            self.handle.seek(0)
            data = self.handle.read()
            self.details["reads"] = "old" if data == V1 else "new" if data == V2_LONG else "other"
        except OSError as exc:
            self.details["reads"] = _errno_name(exc)
        return True

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


@dataclass
class RenameRace(_Experiment):
    """Rank 0 replaces the file by rename again and again while the observer reads it: every read
    must be one whole version. The last version is 0xFF: seeing it ends the observation."""

    seconds: float = 1.0
    reads: int = 0
    torn: int = 0
    missing: int = 0

    def prepare(self, root: str) -> None:
        _write(f"{root}/f", bytes([0]) * BLOCK)

    def act(self, root: str) -> None:
        end, version = time.monotonic() + self.seconds, 0
        while True:
            version = (version + 1) % 255
            last = time.monotonic() >= end
            _write(f"{root}/tmp", bytes([255 if last else version]) * BLOCK)
            os.rename(f"{root}/tmp", f"{root}/f")
            if last:
                return

    def check(self, root: str) -> bool:
        self.reads += 1
        try:
            data = _read(f"{root}/f")
        except OSError:
            self.missing += 1
            data = b""
        whole = len(data) == BLOCK and data.count(data[:1]) == BLOCK
        if data and not whole:
            self.torn += 1
        self.details.update(reads=self.reads, torn=self.torn, missing=self.missing)
        return whole and data[:1] == b"\xff"


def _total(trials: list[Trial], key: str) -> int:
    return sum(v for t in trials if isinstance(v := t.details.get(key), int))


def _names(trials: list[Trial], key: str) -> str:
    return ",".join(sorted({str(t.details.get(key)) for t in trials}))


def _any(trials: list[Trial], key: str) -> bool:
    return any(t.details.get(key) is True for t in trials)


def measure(ctx: Context) -> Consistency:
    """One round of every experiment, the rename race running while the observers read
    (a collective)."""
    ctx.progress.phase("consistency", 1)
    experiments: list[Experiment] = [CloseToOpen(), SameTick(), Eexist(), RenameOverOpen(),
                                     RenameRace(delay=0.0, seconds=ctx.settings.rename_seconds)]
    cto, tick, eexist, over, race = run_round(ctx, "consistency", experiments)
    ctx.progress.advance()

    return Consistency(
        close_to_open=all(t.first for t in cto),
        close_to_open_lag=Stats.of([t.lag for t in cto]),
        rename_reads=_total(race, "reads"),
        rename_torn=_total(race, "torn"),
        rename_missing=_total(race, "missing"),
        same_tick=all(t.details.get("same_tick") is True for t in tick),
        same_tick_seen=all(t.seen is not None for t in tick),
        same_tick_lag=Stats.of([t.lag for t in tick]),
        eexist_errno=_names(eexist, "mkdir"),
        eexist_stale=_any(eexist, "stale"),
        makedirs_raised=_any(eexist, "makedirs_raised"),
        rename_over_open=_names(over, "reads"),
    )
