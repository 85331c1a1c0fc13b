"""What a run returns: per-rank outcomes, crashes and hangs with where they happened, the trace."""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, NamedTuple

from . import carriers, plaindata
from .capture import RankOutput, render
from .runspec import encode
from .visible import framed, visible

_SIMFS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB_DIRS = tuple({sysconfig.get_paths()["stdlib"] + os.sep,
                      os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep})
_GREENLET_HINT = os.sep + "greenlet" + os.sep


def _is_internal(filename: str) -> bool:
    return filename.startswith(_SIMFS_DIR) or _GREENLET_HINT in filename


_SIMFS, _STDLIB, _RANK_CODE = 0, 1, 2
_KINDS: dict[str, int] = {}  # a code's file name -> whose code it is (asked on every rank request)


def _library_dirs() -> tuple[str, ...]:
    """Libraries a job calls into whose frames are not where it waits or fails: torch's own
    (torch.distributed's functions, DDP, DCP), once imported."""
    torch = sys.modules.get("torch")
    path = getattr(torch, "__file__", None)
    return (os.path.dirname(path) + os.sep,) if isinstance(path, str) else ()


def _kind(filename: str) -> int:
    kind = _KINDS.get(filename)
    if kind is None:
        kind = _KINDS[filename] = _SIMFS if _is_internal(filename) else \
            _STDLIB if filename.startswith((*_STDLIB_DIRS, *_library_dirs())) or filename.startswith("<frozen ") \
            else _RANK_CODE
    return kind


def user_frame(frame: FrameType | None) -> str:
    """'file:line in function' of the innermost frame of rank code (not simfs, not stdlib, not torch).
    Runs inside ranks too, so it must not touch the filesystem."""
    fallback: FrameType | None = None
    while frame is not None:
        kind = _kind(frame.f_code.co_filename)
        if kind == _RANK_CODE:
            break
        if kind == _STDLIB and fallback is None:
            fallback = frame
        frame = frame.f_back
    found = frame or fallback
    if found is None:
        return ""
    code = found.f_code
    return f"{code.co_filename}:{found.f_lineno} in {code.co_name}"


def where_raised(exc: BaseException) -> str:
    """'file:line in function' of the rank code that raised ``exc``: from its traceback, or, for
    an exception a rank process raised (it arrives without one), as that process found it."""
    sent = getattr(exc, "simfs_where", None)
    if isinstance(sent, str):
        return sent
    tb, frame = exc.__traceback__, None
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
    return user_frame(frame)


def format_exception(exc: BaseException) -> str:
    """A traceback without simfs's own frames."""
    tb = exc.__traceback__
    frames = [f for f in traceback.extract_tb(tb) if not _is_internal(f.filename)]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    lines.extend(traceback.format_exception_only(type(exc), exc))
    return "".join(lines)


class TraceEvent(NamedTuple):
    """One simulated operation: when it started, who, what, on which path, and how it ended."""

    time: float
    rank: int
    node: int
    op: str
    path: str
    outcome: str
    stale: str = ""  # what a cache answered that the server no longer held

    def __str__(self) -> str:
        who = f"rank {self.rank}" if self.rank >= 0 else f"node {self.node}"
        stale = f" (stale: {self.stale})" if self.stale else ""
        return f"{self.time:12.6f}s {who:>8} {self.op:<10} {self.path} -> {self.outcome}{stale}"


@dataclass
class CrashInfo:
    """A rank that died with its node."""

    rank: int
    node: int
    time: float
    op: str
    path: str
    where: str
    why: str

    def __str__(self) -> str:
        doing = f" during {self.op} {self.path}" if self.op else ""
        return f"rank {self.rank} died with node {self.node} at {self.time:g}s{doing} ({self.why}) at {self.where}"


@dataclass
class HangInfo:
    """Where a rank waited for something that never came."""

    rank: int
    what: str
    since: float
    waited: float
    waiting_for: list[int]
    where: str = ""

    def __str__(self) -> str:
        peers = f" for ranks {self.waiting_for}" if self.waiting_for else ""
        at = f" at {self.where}" if self.where else ""
        return f"rank {self.rank} waited {self.waited:g}s in {self.what}{peers}{at}"


@dataclass
class ThreadError:
    """An exception that ended a thread a rank started (after the rank's threading.excepthook)."""

    thread: str
    error: BaseException
    traceback: str

    def __str__(self) -> str:
        return f"thread {self.thread!r} raised {type(self.error).__name__}: {self.error}"


@dataclass
class Result:
    """The outcome of one ``Cluster.run``. Keys of the dicts are global ranks."""

    returns: dict[int, Any]
    errors: dict[int, BaseException]
    tracebacks: dict[int, str]
    thread_errors: dict[int, list[ThreadError]]
    crashed: dict[int, CrashInfo]
    hung: dict[int, Any]
    virtual_time: float
    wall_time: float
    trace: list[TraceEvent]
    replay_spec: dict[str, Any]  # what simfs.replay needs to run it again (JSON data)
    ops: int
    switches: int
    notes: list[str] = field(default_factory=list)
    node_ops: list[int] = field(default_factory=list)  # filesystem operations of each node's ranks
    carrier: str = carriers.BEFORE_CARRIERS  # how the ranks were carried (simfs/carriers.py); unset: older records
    output: dict[int, RankOutput] = field(default_factory=dict)  # what ranks printed and warned (capture.py)
    rank_ops: list[int] = field(default_factory=list)  # filesystem operations each rank began (Pause counts them)

    @property
    def replay(self) -> str:
        """The replay string: ``simfs.replay(text)`` runs this run again (encoded when asked for:
        most runs of a search are never replayed)."""
        return encode(self.replay_spec)

    @property
    def ok(self) -> bool:
        """No rank raised, crashed or hung, and no thread a rank started died of an exception
        (a thread's uncaught exception is a bug even when the rank goes on)."""
        return not self.errors and not self.crashed and not self.hung and not self.thread_errors

    def summary(self) -> str:
        """A human-readable account of the run."""
        head = "ok" if self.ok else "FAILED"
        ranks = len(set(self.returns) | set(self.errors) | set(self.crashed) | set(self.hung))
        carried = "processes" if self.carrier == "process" else "greenlets"
        lines = [f"simfs run {head}: {ranks} ranks as {carried}, "
                 f"{self.ops} operations, {self.virtual_time:g}s virtual in {self.wall_time:.3f}s wall"]
        for _rank, info in sorted(self.crashed.items()):
            lines.append(f"  crashed: {framed(str(info))}")
        for _rank, info in sorted(self.hung.items()):
            lines.append(f"  hung: {framed(str(info))}")
        for rank, exc in sorted(self.errors.items()):
            lines.append(f"  rank {rank} raised {type(exc).__name__}: {framed(str(exc))}")
        for rank, failures in sorted(self.thread_errors.items()):
            lines.extend(f"  rank {rank}: {framed(str(failure))}" for failure in failures)
        lines.extend(f"  note: {n}" for n in self.notes)
        if self.output and not self.ok:  # as pytest shows a failing test's captured output
            lines.append("  output of the ranks:")
            lines.extend("    " + line for line in render(self.output).split("\n"))
        lines.append(f"  replay: {self.replay}")
        return visible("\n".join(lines))  # ranks' errors: their control sequences shown, not sent

    def __repr__(self) -> str:
        return f"<simfs.Result ok={self.ok} ranks={len(self.returns)} errors={sorted(self.errors)} " \
               f"crashed={sorted(self.crashed)} hung={sorted(self.hung)} virtual_time={self.virtual_time:g}>"


def result_to_json(result: Result, *, trace: bool = False) -> dict[str, Any]:
    """A JSON-ready account of a run (schema version 1)."""
    out: dict[str, Any] = {
        "schema": 1,
        "ok": result.ok,
        "carrier": result.carrier,
        "virtual_time": result.virtual_time,
        "wall_time": result.wall_time,
        "ops": result.ops,
        "returns": {str(r): repr(v) for r, v in sorted(result.returns.items())},
        "errors": {str(r): {"type": type(e).__name__, "message": str(e), "traceback": result.tracebacks.get(r, "")}
                   for r, e in sorted(result.errors.items())},
        "crashed": {str(r): {"node": c.node, "time": c.time, "op": c.op, "path": c.path, "where": c.where, "why": c.why}
                    for r, c in sorted(result.crashed.items())},
        "thread_errors": {str(r): [{"thread": t.thread, "type": type(t.error).__name__, "message": str(t.error),
                                    "traceback": t.traceback} for t in ts]
                          for r, ts in sorted(result.thread_errors.items())},
        "hung": {str(r): {"what": h.what, "since": h.since, "waited": h.waited, "waiting_for": h.waiting_for,
                          "where": h.where} for r, h in sorted(result.hung.items())},
        "notes": list(result.notes),
        "replay": result.replay,
    }
    if trace:
        out["trace"] = [list(event) for event in result.trace]
    return out


plaindata.register(Result, CrashInfo, HangInfo, ThreadError, TraceEvent)
