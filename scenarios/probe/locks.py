"""Do flock() and fcntl (POSIX) locks exclude a second holder on the same node (another process)
and on other nodes? flock's scope follows: cluster, node or none."""

from __future__ import annotations

import errno
import fcntl
import subprocess
import sys
from typing import IO, Literal

from .context import Context
from .report import Locks

Kind = Literal["flock", "fcntl"]

# a second process on this node: exit 0 if it got the lock, 1 if refused, 2 + errno text otherwise
_TRY = """
import errno, fcntl, sys
f = open(sys.argv[1], "r+")
try:
    (fcntl.flock if sys.argv[2] == "flock" else fcntl.lockf)(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(1)
except OSError as exc:
    print(errno.errorcode.get(exc.errno, exc.errno)); sys.exit(2)
"""


def _lock(f: IO[str], kind: Kind, flags: int) -> None:
    (fcntl.flock if kind == "flock" else fcntl.lockf)(f, flags)


def _try_here(path: str, kind: Kind) -> bool | str:
    """Refused (True), granted (False), or the errno name, for this process."""
    with open(path, "r+") as f:
        try:
            _lock(f, kind, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError as exc:
            return errno.errorcode.get(exc.errno or 0, str(exc))
        return False


def _try_in_child(path: str, kind: Kind) -> bool | str:
    """The same, from a second process on this node."""
    done = subprocess.run([sys.executable, "-c", _TRY, path, kind], capture_output=True, text=True, timeout=60)
    return {0: False, 1: True}.get(done.returncode, done.stdout.strip() or done.stderr.strip()[-200:])


def _exclusion(ctx: Context, kind: Kind) -> tuple[bool | str, bool | str | None]:
    """Rank 0 holds an exclusive lock; a process beside it and each observer try to take it."""
    name = ctx.session.fresh(kind)
    path = ctx.session.path(name)
    holder: IO[str] | None = None
    same_node: bool | str = False
    try:
        if ctx.actor:
            holder = open(path, "w+")  # noqa: SIM115 - held until the others have tried
            _lock(holder, kind, fcntl.LOCK_EX)
            same_node = _try_in_child(path, kind)
        ctx.comm.barrier()
        mine = _try_here(path, kind) if ctx.observer else None
        tries = ctx.comm.all_gather_object(mine)
    finally:
        if holder is not None:
            holder.close()
    cross = [tries[r] for r in ctx.observers]
    refused = [t for t in cross if t is not True]
    cross_node = None if not cross else True if not refused else refused[0]
    return ctx.comm.broadcast_object(same_node), cross_node


def _scope(same: bool | str, cross: bool | str | None) -> Literal["cluster", "node", "none"] | None:
    if cross is True:
        return "cluster"
    if same is True:
        return "node" if cross is not None else None
    return "none" if same is False else None


def measure(ctx: Context) -> Locks:
    """Both kinds (a collective)."""
    ctx.progress.phase("locks", 2)
    flock_same, flock_cross = _exclusion(ctx, "flock")
    ctx.progress.advance()
    fcntl_same, fcntl_cross = _exclusion(ctx, "fcntl")
    ctx.progress.advance()
    return Locks(flock_same, flock_cross, fcntl_same, fcntl_cross, _scope(flock_same, flock_cross))
